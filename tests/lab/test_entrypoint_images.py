"""Ring 3: registry images with an ENTRYPOINT under Enroot and pyxis (issue 34, item 4).

``enroot import docker://...`` writes a registry image's ENTRYPOINT into the image's /etc/rc
(``exec ENTRYPOINT "$@"``), which every ``enroot start`` runs before the command. Two such
images, built once from the lab's base and imported by Enroot from a real registry on
127.0.0.1 (tests/helpers/entrypoint_images.py, cached as build/entry-banner.sqsh and
build/entry-nonexec.sqsh):

- ``banner``: the entrypoint prints a banner and execs the command (as NGC's does);
- ``nonexec``: the entrypoint runs its own program, never the command, and exits 0.

Covered: the imported images really carry their entrypoint (/etc/rc) and a plain
``enroot start`` runs it (the nonexec one instead of the command); then with each image a
2-node job in mode torchrun and in mode srun, under Enroot and under pyxis, runs the kit's
command (the program's all_reduce summary on both nodes) and never the entrypoint (none of its
lines in the log); one rank per node, since which command starts does not depend on how many
ranks it starts (issue 42: eight jobs, half the processes). The pyxis jobs set ``PYXIS_CONTAINER_ENTRYPOINT=1``, as a site whose
plugstack says ``execute_entrypoint=1``: the kit's ``--no-container-entrypoint`` must win.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.helpers import entrypoint_images
from tests.helpers.labjobs import make

REPO = Path(__file__).resolve().parents[2]
PY = str(Path(os.environ.get("VENV", REPO / ".venv")) / "bin" / "python")
PROGRAM = "tests/helpers/programs/which_launcher.py"
MARK = entrypoint_images.MARK
SPEC = """\
job:
  nodes: 2
  time: "00:05:00"
  partition: batch
site: jsc
runtime:
  kind: {runtime}
  image: build/entry-{image}.sqsh
  keep_old: 0
{env}launch:
  mode: {mode}
  procs_per_node: 1
program: [python3, -u, {program}]
"""
# A site that runs images' entrypoints under pyxis (plugstack execute_entrypoint=1; pyxis
# >= 0.21 also reads it from the job's environment): the kit's flag must override it.
PYXIS_SITE_RUNS_ENTRYPOINTS = "env:\n  set:\n    PYXIS_CONTAINER_ENTRYPOINT: '1'\n"


# The test's containers on each node, Enroot's and pyxis' (runtime kind enroot: NAME-SIZE-MTIME,
# pyxis: pyxis_NAME-SIZE-MTIME).
CONTAINERS = "^(pyxis_)?entry-(" + "|".join(sorted(entrypoint_images.SCRIPTS)) + ")-"
REMOVE = f"""#!/bin/bash
srun --ntasks-per-node=1 bash -c 'enroot list | grep -E "{CONTAINERS}" | while read -r name; do
    enroot remove -f "$name" </dev/null; done; ! enroot list | grep -E "{CONTAINERS}"'
"""


def remove_containers(cluster, folder: Path, when: str) -> None:
    script = folder / f"remove-{when}.sh"
    script.write_text(REMOVE)
    res = cluster.run_job(str(script), ["-N", "2", "-p", "batch", "-t", "10", "-o",
                                        str(folder / f"remove-{when}-%j.out")], timeout=900,
                          cwd=str(REPO))
    assert res.state == "COMPLETED", res.output


@pytest.fixture(scope="module")
def entry_images(cluster):
    """The images, and no container of theirs on the nodes before and after the module: pyxis
    writes `exec "$@"` into a named container's /etc/rc.local whenever it starts it without
    the entrypoint, for good, so only a fresh container shows what the kit's flag does (and
    these unpack to 1.2 GB each per node)."""
    make("build/base-local.sif")
    images = entrypoint_images.images()
    (REPO / "build/lab-tmp").mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="entry-containers-", dir=REPO / "build/lab-tmp"))
    folder.chmod(0o1777)
    remove_containers(cluster, folder, "before")
    yield images
    remove_containers(cluster, folder, "after")
    shutil.rmtree(folder, ignore_errors=True)


def test_the_imported_images_run_their_entrypoint(entry_images):
    """What Enroot's registry import wrote, and what a plain ``enroot start`` (no kit) runs:
    the banner entrypoint prints and runs the command, the nonexec one runs instead of it."""
    for name, image in entry_images.items():
        rc = subprocess.run(["unsquashfs", "-cat", str(image), "etc/rc"], capture_output=True,
                            text=True, timeout=60, check=True).stdout
        assert f"exec '{entrypoint_images.ENTRYPOINT}' \"$@\"" in rc, rc
        ran = subprocess.run(["enroot", "start", str(image), "python3", "-c",
                              "print('the command ran')"], capture_output=True, text=True,
                             timeout=120, check=False)
        out = ran.stdout + ran.stderr
        assert ran.returncode == 0, out
        if name == "banner":
            assert out.splitlines() == [f"{MARK}BANNER: === lab image with a banner entrypoint ===",
                                        "the command ran"], out
        else:
            assert out.splitlines() == [f"{MARK}NONEXEC: the image's own program ran instead of: "
                                        "python3 -c print('the command ran')"], out


@pytest.mark.parametrize("image", sorted(entrypoint_images.SCRIPTS))
@pytest.mark.parametrize("runtime", ["enroot", "pyxis"])
@pytest.mark.parametrize("mode", ["torchrun", "srun"])
def test_the_kit_runs_its_command_not_the_entrypoint(cluster, shared_tmp, entry_images, image,
                                                     runtime, mode):
    spec = shared_tmp / f"entry-{image}-{runtime}-{mode}.yaml"
    spec.write_text(SPEC.format(runtime=runtime, image=image, mode=mode, program=PROGRAM,
                                env=PYXIS_SITE_RUNS_ENTRYPOINTS if runtime == "pyxis" else ""))
    job = spec.with_suffix(".job")
    p = subprocess.run([PY, "-m", "launcher", "render", str(spec), "-o", str(job)],
                       capture_output=True, text=True, timeout=60, cwd=REPO, check=False)
    assert p.returncode == 0, p.stdout + p.stderr
    res = cluster.run_job(str(job), ["-o", str(shared_tmp / "entry-%j.out")], timeout=300,
                          cwd=str(REPO))
    assert res.state == "COMPLETED", res.output
    assert MARK not in res.output, res.output  # no entrypoint ran, not even the banner
    found = [line.split("FOREIGN_SUMMARY ", 1)[1] for line in res.output.splitlines()
             if "FOREIGN_SUMMARY " in line]
    assert len(found) == 1, res.output  # the kit's command ran, once, on rank 0
    got = json.loads(found[0])
    assert got["ok"] and got["world_size"] == 2 and got["hosts"] == ["jwb0001", "jwb0002"], got
