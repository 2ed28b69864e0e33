"""Ring 3: runtime.stage (issue 36, item 5) in a real 2-node job in Apptainer: the image is
broadcast to every node's own /tmp by Slurm's sbcast, every step runs that copy, and the copy
is gone from every node after the job, here one whose program fails (exit 3), so the removal
does not depend on success. A copy that an ended job left on node 1 (planted before) is
removed by the check step. Checked from the program's own output (the image path Apptainer
reports inside the container, APPTAINER_CONTAINER, and the copy's size there), the job's log
(the staging and removal lines) and the nodes' /tmp directories themselves (the lab binds
/run/torchrun-jsc-cluster/node/NAME/tmp over each node's /tmp). One short srun-mode job.

Enroot and pyxis: a fresh squashfs (a new stamp) is staged only to the nodes that lack the
container, each set-up creates it from the copy and removes the copy; the next job stages
nothing; one that lacks it gets the only copy (short srun-mode jobs: three with Enroot, two
with pyxis)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PY = REPO / ".venv" / "bin" / "python"
NODE_TMP = Path("/run/torchrun-jsc-cluster/node")
# Each node's task prints what it runs, marks that in the shared directory and waits for the
# other's mark (a failing task makes srun end the other: both must have printed); then task 0
# fails.
PROBE = ("import os, sys, time; p = os.environ['APPTAINER_CONTAINER']; "
         "node = os.environ['SLURMD_NODENAME']; "
         "print('STAGE_PROBE', node, p, os.stat(p).st_size, flush=True); "
         "open(os.path.join(sys.argv[1], node), 'w').close(); end = time.time() + 60\n"
         "while len(os.listdir(sys.argv[1])) < 2 and time.time() < end: time.sleep(0.1)\n"
         "sys.exit(3 if os.environ['SLURM_PROCID'] == '0' else 0)")
SPEC = """\
job:
  nodes: 2
  time: "00:05:00"
  partition: batch
  node_output: null
site: jsc
runtime:
  kind: {kind}
  image: {image}
  stage: true{extra}
launch:
  mode: srun
program: {program}
"""


def render(shared_tmp: Path, name: str, **fields: str) -> Path:
    """SPEC with ``fields`` as shared_tmp/NAME.yaml, rendered by the composer's CLI to
    shared_tmp/NAME.job."""
    spec, job = shared_tmp / f"{name}.yaml", shared_tmp / f"{name}.job"
    spec.write_text(SPEC.format(**{"extra": "", **fields}))
    p = subprocess.run([str(PY), "-m", "launcher", "render", str(spec), "-o", str(job)],
                       capture_output=True, text=True, timeout=60, cwd=REPO, check=False)
    assert p.returncode == 0, p.stderr
    return job


def test_staged_image_runs_on_every_node_and_is_removed_after_a_failed_program(
        cluster, shared_tmp):
    image = REPO / "image.sif"
    assert image.exists(), "no image.sif: make image builds it"
    size = image.stat().st_size
    uid = os.getuid()
    # A copy left by an ended job (job 1 of this lab has long ended) on node 1.
    planted = NODE_TMP / "jwb0001" / "tmp" / f"torchrun-jsc-stage-{uid}-1-image.sif"
    planted.write_bytes(b"left by a cancelled job")
    marks = shared_tmp / "marks"
    marks.mkdir()
    job = render(shared_tmp, "stage", kind="apptainer", image=str(image),
                 program=f"[python3, -c, {json.dumps(PROBE)}, {marks}]")
    res = cluster.run_job(str(job), ["-o", str(shared_tmp / "stage-%j.out")], timeout=180,
                          cwd=str(REPO))
    out = res.output
    # The program failed (srun ends the other node's task: the job's status may be its 143).
    assert res.state == "FAILED" and "task 0: Exited with exit code 3" in out, out
    # The copy is in a directory of the job's own, named at random (stage.sh make).
    found = re.search(rf"the steps run (/tmp/torchrun-jsc-stage-{uid}-{res.job_id}-"
                      r"[0-9a-f]{12}/image\.sif)\n", out)
    assert f"image {image} staged to /tmp on 2 nodes in " in out and found, out
    copy = found[1]
    # The program ran the copy, on both nodes, and saw it whole.
    probes = sorted(line.split()[1:] for line in out.splitlines()
                    if line.startswith("STAGE_PROBE"))
    assert probes == [["jwb0001", copy, str(size)], ["jwb0002", copy, str(size)]], out
    assert f"runtime.stage: removed /tmp/{planted.name} on jwb0001 (job 1 has ended)" in out
    assert f"staged image {copy} removed on 2 nodes" in out, out
    for node in ("jwb0001", "jwb0002"):
        left = sorted(q.name for q in (NODE_TMP / node / "tmp").glob("torchrun-jsc-stage-*"))
        assert left == [], (node, left)


# --- Enroot and pyxis: the squashfs staged where the container is created ---------------------

RAN = """[python3, -c, "import os; print('STAGE_RAN', os.environ['SLURMD_NODENAME'], flush=True)"]"""


def staged_copy(out: str, uid: int, job_id: str) -> str:
    """The squashfs copy's path in job ``job_id``'s log (its directory is named at random)."""
    found = re.search(rf"the set-up creates the container from (/tmp/torchrun-jsc-stage-{uid}-"
                      rf"{job_id}-[0-9a-f]{{12}}/image\.sqsh)\n", out)
    assert found, out
    return found[1]


@pytest.mark.parametrize("kind", ["enroot", "pyxis"])
def test_squashfs_staged_only_where_the_container_is_created(cluster, shared_tmp, kind):
    """A fresh image (a copy: a new stamp, so a new container): the first job stages it to
    both nodes, each set-up creates the container from the copy and removes it; the second
    job finds the container on both nodes and stages nothing; once node 2 has lost its
    container, the third stages to node 2 only (enroot; pyxis asks its list the same way)."""
    image = shared_tmp / "image.sqsh"
    shutil.copyfile(REPO / "image.sqsh", image)
    job = render(shared_tmp, kind, kind=kind, image=str(image), program=RAN,
                 extra="\n  container_name: image")
    uid = os.getuid()
    st = image.stat()
    name = f"image-{st.st_size}-{int(st.st_mtime)}"
    outs = []
    for round_ in range(3 if kind == "enroot" else 2):
        if round_ == 2:  # node 2 lost its container (a node replaced, a clean-up)
            removed = subprocess.run(
                ["srun", "-w", "jwb0002", "-N1", "-n1", "-p", "batch", "enroot", "remove",
                 "-f", name],
                capture_output=True, text=True, timeout=120, check=False)
            assert removed.returncode == 0, removed.stderr
        res = cluster.run_job(str(job), ["-o", str(shared_tmp / "%j.out")], timeout=300,
                              cwd=str(REPO))
        print(f"job {res.job_id} {res.state}:\n{res.output[-1500:]}")
        assert res.state == "COMPLETED", res.output
        ran = sorted(line.split()[1] for line in res.output.splitlines()
                     if line.startswith("STAGE_RAN"))
        assert ran == ["jwb0001", "jwb0002"], res.output
        outs.append((res.job_id, res.output))
    (first_id, first), (_, second) = outs[:2]
    copy = staged_copy(first, uid, first_id)
    assert f"image {image} staged to /tmp on 2 nodes in " in first, first
    assert f"the set-up creates the container from {copy}" in first, first
    assert first.count(f"{kind}: creating container ") == 2 and f" from {copy} on " in first
    assert "not staged" not in first
    assert "container image-" in second and "is on every node already: not staged" in second
    assert second.count(f"{kind}: reusing container ") == 2 and "staged to" not in second
    if kind == "enroot":  # only node 2 lacks it: only node 2 gets the copy
        third_id, third = outs[2]
        copy = staged_copy(third, uid, third_id)
        assert f"image {image} staged to /tmp on 1 node in " in third, third
        assert f"creating container {name} from {copy} on jwb0002" in third, third
        assert f"reusing container {name} on jwb0001" in third, third
    for node in ("jwb0001", "jwb0002"):
        left = sorted(q.name for q in (NODE_TMP / node / "tmp").glob("torchrun-jsc-stage-*"))
        assert left == [], (node, left)
