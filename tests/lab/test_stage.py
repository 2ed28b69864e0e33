"""Ring 3: runtime.stage (issue 36, item 5) in a real 2-node job in Apptainer: the image is
broadcast to every node's own /tmp by Slurm's sbcast, every step runs that copy, and the copy
is gone from every node after the job, here one whose program fails (exit 3), so the removal
does not depend on success. A copy that an ended job left on node 1 (planted before) is
removed by the check step. Checked from the program's own output (the image path Apptainer
reports inside the container, APPTAINER_CONTAINER, and the copy's size there), the job's log
(the staging and removal lines) and the nodes' /tmp directories themselves (the lab binds
/run/torchrun-jsc-cluster/node/NAME/tmp over each node's /tmp). One short srun-mode job."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

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
  kind: apptainer
  image: {image}
  stage: true
launch:
  mode: srun
program: [python3, -c, {probe}, {marks}]
"""


def test_staged_image_runs_on_every_node_and_is_removed_after_a_failed_program(
        cluster, shared_tmp):
    image = REPO / "image.sif"
    assert image.exists(), "no image.sif: make image builds it"
    size = image.stat().st_size
    uid = os.getuid()
    # A copy left by an ended job (job 1 of this lab has long ended) on node 1.
    planted = NODE_TMP / "jwb0001" / "tmp" / f"torchrun-jsc-stage-{uid}-1-image.sif"
    planted.write_bytes(b"left by a cancelled job")
    spec = shared_tmp / "stage.yaml"
    marks = shared_tmp / "marks"
    marks.mkdir()
    spec.write_text(SPEC.format(image=image, probe=json.dumps(PROBE), marks=marks))
    job = shared_tmp / "stage.job"
    p = subprocess.run([str(PY), "-m", "launcher", "render", str(spec), "-o", str(job)],
                       capture_output=True, text=True, timeout=60, cwd=REPO, check=False)
    assert p.returncode == 0, p.stderr
    res = cluster.run_job(str(job), ["-o", str(shared_tmp / "stage-%j.out")], timeout=180,
                          cwd=str(REPO))
    out = res.output
    # The program failed (srun ends the other node's task: the job's status may be its 143).
    assert res.state == "FAILED" and "task 0: Exited with exit code 3" in out, out
    copy = f"/tmp/torchrun-jsc-stage-{uid}-{res.job_id}-image.sif"
    assert f"image {image} staged to /tmp on 2 nodes in " in out, out
    assert f"the steps run {copy}" in out, out
    # The program ran the copy, on both nodes, and saw it whole.
    probes = sorted(line.split()[1:] for line in out.splitlines()
                    if line.startswith("STAGE_PROBE"))
    assert probes == [["jwb0001", copy, str(size)], ["jwb0002", copy, str(size)]], out
    assert f"runtime.stage: removed /tmp/{planted.name} on jwb0001 (job 1 has ended)" in out
    assert f"staged image {copy} removed on 2 nodes" in out, out
    for node in ("jwb0001", "jwb0002"):
        left = sorted(q.name for q in (NODE_TMP / node / "tmp").glob("torchrun-jsc-stage-*"))
        assert left == [], (node, left)
