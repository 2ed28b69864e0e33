"""Ring 2, issue 26 item 6: the stack hook reaches the ranks the same way in every runtime.
Rendered jobs run by bash with the recording fakes, whose runtimes apply an image's own
environment as the real ones do (tests/helpers/fake.py, FAKE_IMAGE_ENV: Apptainer and pyxis
over the task's values, Enroot under the names it forwards): a program started in a container
whose image sets PYTHONPATH=/opt/image-lib gets ``$kit/task/hook:/opt/image-lib``; without
an image PYTHONPATH the hook comes first and what the runtime passed on stays after it (the
batch shell's under bare, Apptainer and pyxis; Enroot passes none by itself). The prelude
itself run by POSIX sh (dash): no empty entry, the program's argv byte-identical, no shell left
between.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, Iterator, List, Optional

import pytest
import yaml

from launcher import kit
from launcher.features import hangs as hangs_feature
from tests.helpers.cluster import HOSTILE_NL, Cluster, cleaned

IMAGE_LIB = "/opt/image-lib"
# The batch shell's own PYTHONPATH (a module's, the user's), with what quoting must survive.
HOST_LIB = "/host lib/it's $HOME"
RUNTIMES = {"apptainer": {"kind": "apptainer", "image": "image.sif"},
            "enroot": {"kind": "enroot", "image": "image.sqsh"},
            "pyxis": {"kind": "pyxis", "image": "image.sqsh"},
            "bare": {"kind": "bare"}}
# Enroot and pyxis mounts cannot express whitespace: their submit dir has none.
SUBMIT_DIR = {"apptainer": "submit dir ü", "bare": "submit dir ü"}


@pytest.fixture
def cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    runtime = request.node.callspec.params["runtime"]
    yield from cleaned(Cluster(tmp_path, SUBMIT_DIR.get(runtime, "submit_dir")))


def run_job(cluster: Cluster, runtime: str, mode: str, image_env: Optional[Dict[str, str]],
            host_path: Optional[str] = None) -> List[dict]:
    """Render and run a 2-node job; the records of every program process (fake python3)."""
    for image in ("image.sif", "image.sqsh"):
        (cluster.dir / image).write_text("image")
    spec = {"job": {"nodes": 2}, "site": "jsc", "runtime": RUNTIMES[runtime],
            "launch": {"mode": mode, "procs_per_node": 2}, "program": ["python3", "train.py"]}
    script = cluster.render(yaml.safe_dump(spec))
    extra = {"FAKE_IMAGE_ENV": json.dumps(image_env or {})}
    env = dict(cluster.env)
    env.pop("PYTHONPATH", None)
    if host_path is not None:
        env["PYTHONPATH"] = host_path
    cluster.env = env
    done = cluster.run(script, **extra)
    assert done.returncode == 0, done.stdout + done.stderr
    programs = [r for r in cluster.records("python3") if r["argv"][:1] == ["train.py"]]
    assert len(programs) == (4 if mode == "srun" else 2)  # torchrun: one worker per node here
    return programs


def hook(cluster: Cluster) -> str:
    """The kit's hook directory (launcher/task/hook), where hook.sh puts it."""
    return str(kit.installed() / "task" / "hook")


@pytest.mark.parametrize("mode", ["srun", "torchrun"])
@pytest.mark.parametrize("runtime", ["apptainer", "enroot", "pyxis"])
def test_image_pythonpath_kept_after_the_hook(cluster, runtime, mode):
    """srun: the task script on the host, the program in the container (under pyxis the whole
    task, bash included, in the container); torchrun: the per-node agent in the container.
    The batch shell's PYTHONPATH does not replace the image's (Enroot used to forward it)."""
    programs = run_job(cluster, runtime, mode, {"PYTHONPATH": IMAGE_LIB}, host_path=HOST_LIB)
    for rec in programs:
        assert rec["env"]["PYTHONPATH"] == f"{hook(cluster)}:{IMAGE_LIB}", rec
        assert rec["env"]["TORCHRUN_JSC_STACKS"] == f"{cluster.dir}/.hangs/4242"
    assert (kit.installed() / "task/hook/sitecustomize.py").is_file()


@pytest.mark.parametrize("runtime", ["apptainer", "enroot", "pyxis", "bare"])
def test_without_image_pythonpath_the_hook_comes_first(cluster, runtime):
    for rec in run_job(cluster, runtime, "srun", None):
        assert rec["env"]["PYTHONPATH"] == hook(cluster), rec


@pytest.mark.parametrize("runtime, after", [("bare", HOST_LIB), ("apptainer", HOST_LIB),
                                            ("pyxis", HOST_LIB), ("enroot", None)])
def test_what_the_runtime_passed_on_stays_after_the_hook(cluster, runtime, after):
    """Bare (site.venv or not): the batch shell's PYTHONPATH after the hook, as before, and so
    under Apptainer and pyxis, which pass the task's environment on; Enroot forwards only the
    names the spec exports (env.set, env.prepend, env.pass), so the host's stays outside."""
    for rec in run_job(cluster, runtime, "srun", None, host_path=HOST_LIB):
        want = hook(cluster) + (f":{after}" if after else "")
        assert rec["env"]["PYTHONPATH"] == want, rec


@pytest.mark.parametrize("given, want", [
    (None, "/k d/task/hook"),  # no PYTHONPATH: the hook alone
    ("", "/k d/task/hook"),  # empty: no trailing ':' (would put the current directory first)
    (HOST_LIB + ":/b", f"/k d/task/hook:{HOST_LIB}:/b"),
])
def test_the_prelude_itself_under_posix_sh(tmp_path, given, want):
    """The prelude (launcher/task/hook.sh, in a kit at a path with a space), run by sh (the
    image's /bin/sh need be no bash): the program's argv arrives byte-identical, and sh is gone
    (exec), so signals reach it."""
    kit_dir = tmp_path / "k d"
    (kit_dir / "task").mkdir(parents=True)
    shutil.copy(kit.installed() / "task" / "hook.sh", kit_dir / "task" / "hook.sh")
    env = {"PATH": os.environ["PATH"], "TORCHRUN_JSC_STACKS": "/h d"}
    if given is not None:
        env["PYTHONPATH"] = given
    probe = "import os, sys; print(repr((os.environ['PYTHONPATH'], sys.argv[1:], os.getpid())))"
    argv = hangs_feature.hook_argv([sys.executable, "-I", "-c", probe, HOSTILE_NL, "", "*"])
    assert argv[:2] == ["sh", kit.file(hangs_feature.HOOK_SCRIPT)]
    argv[1] = str(kit_dir / "task" / "hook.sh")  # what "${kit}/task/hook.sh" expands to
    p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True)
    out, _ = p.communicate(timeout=30)
    assert ast.literal_eval(out) == (want.replace("/k d", str(kit_dir)),
                                     [HOSTILE_NL, "", "*"], p.pid)
