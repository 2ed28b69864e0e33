"""Ring 3: a job in a Python 3.8 + torch 1.9 environment (issue 34): NGC 21.xx-22.xx and most
torch 1.9-1.13 images have Python 3.8, and a 3.9+ call (``str.removeprefix``) once killed every
torchrun_jsc agent of a job with job.requeue there with a traceback. The venv is the one
``scripts/torch-compat.sh 1.9.0`` builds (`make test` builds it first: Python 3.8, torch 1.9.0),
used on the nodes as a site venv (bare runtime).

The job: 2 nodes x 2 ranks, torchrun mode (torchrun_jsc's agent, its signal forwarding and the
hook's requeue hold under 3.8), job.requeue and launch.hang_timeout on, examples/ddp_train.py.
Checked: the job COMPLETED, the program's DDP_SUMMARY (4 ranks, all steps, identical parameters)
and that it ran under Python 3.8 and torch 1.9."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PY = REPO / ".venv" / "bin" / "python"
VENV = REPO / "build" / "torch-compat" / "1.9.0"
# PyPI's torch 1.9.0 is a CUDA build, and the lab's exclusive jobs hold the nodes' fake GPUs
# (SLURM_JOB_GPUS), so the examples' device rule would rightly refuse to fall back to the CPU:
# the program runs with that variable dropped.
RUN = ("import os, runpy, sys; os.environ.pop('SLURM_JOB_GPUS', None); "
       "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')")
SPEC = """\
job:
  nodes: 2
  time: "00:10:00"
  partition: batch
  requeue: true
site:
  profile: jsc
  venv: {venv}
env:
  set: {{GLIBC_TUNABLES: glibc.rtld.execstack=2}}  # trixie's glibc and torch < 1.11's libs
launch:
  mode: torchrun
  procs_per_node: 2
  hang_timeout: 300
program: [python3, -u, -c, {run}, examples/ddp_train.py, --steps, 10, --checkpoint-dir, {ckpt}]
"""


def test_python38_torch19_job_with_requeue_and_hang_timeout(cluster, shared_tmp):
    assert (VENV / "bin" / "python3.8").exists(), \
        f"no {VENV} with Python 3.8: scripts/torch-compat.sh 1.9.0 builds it (make test does)"
    spec = shared_tmp / "py38.yaml"
    spec.write_text(SPEC.format(venv=VENV, ckpt=shared_tmp / "ckpt", run=json.dumps(RUN)))
    job = shared_tmp / "py38.job"
    p = subprocess.run([str(PY), "-m", "launcher", "render", str(spec), "-o", str(job)],
                       capture_output=True, text=True, timeout=60, cwd=REPO, check=False)
    assert p.returncode == 0, p.stderr
    res = cluster.run_job(str(job), ["-o", str(shared_tmp / "py38-%j.out")], timeout=300,
                          cwd=str(REPO))
    assert res.state == "COMPLETED", res.output
    # No traceback through the kit's code (torch 1.9's own agent logs one when the store host
    # has left before the other agent's exit barrier: "Error waiting on exit barrier").
    assert f'File "{REPO}/launcher' not in res.output, res.output
    [got] = res.summaries
    assert cluster.check_summary(got, 4) == [], got
    assert got["steps"] == 10 and got["python"] == "3.8" and got["torch"].startswith("1.9.0"), got
