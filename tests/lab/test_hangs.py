"""Ring 3: hang reports on the local JSC-like cluster.

A rendered spec (repository venv or image.sif; mode torchrun or srun; 2 nodes x 2) runs
tests/helpers/programs/hang_ranks.py: rank 3 sticks in its own function, ranks 0-2 wait for it in
all_reduce. Checked:
  - `jsc-compose stacks JOBID` from outside the allocation names the odd one out, the job
    still runs afterwards;
  - a minute before the time limit (--signal=B:URG@60) the job's log gets the same lines;
  - a job that does not hang finishes as before, with no stacks in its log;
  - the rendezvous timeouts the jobscript computed reach torchrun (--rdzv_conf in the log).
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PY = str(Path(os.environ.get("VENV", REPO / ".venv")) / "bin" / "python")

SPEC = """\
job:
  nodes: 2
  time: "{time}"
  partition: batch
{where}
env:
  set: {{READY_DIR: {ready}, PYTHONWARNINGS: ignore}}
launch:
  mode: {mode}
  procs_per_node: 2
program: [python3, -u, {program}]
"""
VENV_SITE = "site:\n  profile: jsc\n  venv: .venv"
IMAGE_SITE = "site: jsc\nruntime:\n  kind: apptainer\n  image: image.sif"


def render(shared_tmp: Path, time_limit: str, program: str, mode: str = "torchrun",
           where: str = VENV_SITE) -> Path:
    ready = shared_tmp / "ready"
    ready.mkdir(exist_ok=True)
    spec = shared_tmp / "hang.yaml"
    spec.write_text(SPEC.format(time=time_limit, ready=ready, program=program, mode=mode,
                                where=where))
    job = shared_tmp / "hang.job"
    p = subprocess.run([PY, "-m", "launcher", "render", str(spec), "-o", str(job)],
                       capture_output=True, text=True, timeout=60, cwd=REPO, check=False)
    assert p.returncode == 0, p.stderr
    return job


def wait_ready(ready: Path, n: int, timeout: float = 240) -> None:
    """Poll until every rank has marked where it stays (bounded; polling, not a fixed wait)."""
    deadline = time.monotonic() + timeout
    while len(list(ready.iterdir())) < n:
        assert time.monotonic() < deadline, sorted(p.name for p in ready.iterdir())
        time.sleep(0.5)


def stacks(job_id: str, deadline: float) -> subprocess.CompletedProcess:
    """`jsc-compose stacks JOBID`, asked again until ranks 0-2 have gone from their ready mark
    into all_reduce (each call only signals; the job goes on)."""
    while True:
        p = subprocess.run([PY, "-m", "launcher", "stacks", job_id], capture_output=True,
                           text=True, timeout=120, cwd=REPO, check=False)
        if (p.returncode == 0 and p.stdout.startswith("stacks: 3 ranks in all_reduce")) \
                or time.monotonic() > deadline:
            return p


@pytest.fixture(scope="module")
def image() -> Path:
    p = subprocess.run(["make", "image"], capture_output=True, text=True, timeout=2400,
                       cwd=REPO, check=False)
    assert p.returncode == 0, f"make image failed:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return REPO / "image.sif"


@pytest.mark.parametrize("mode, where", [("torchrun", VENV_SITE), ("srun", VENV_SITE),
                                         ("torchrun", IMAGE_SITE)],
                         ids=["torchrun-venv", "srun-venv", "torchrun-apptainer"])
def test_stacks_on_demand_names_the_stuck_rank(cluster, shared_tmp, request, mode, where):
    if where == IMAGE_SITE:
        request.getfixturevalue("image")
    job = render(shared_tmp, "00:05:00", str(REPO / "tests/helpers/programs/hang_ranks.py"), mode,
                 where)
    job_id = cluster.submit(str(job), ["-o", str(shared_tmp / "hang-%j.out")], cwd=str(REPO))
    try:
        wait_ready(shared_tmp / "ready", 4)
        p = stacks(job_id, time.monotonic() + 60)
        assert p.returncode == 0, p.stdout + p.stderr
        print(p.stdout)
        first = p.stdout.splitlines()[0]
        assert first.startswith("stacks: 3 ranks in all_reduce at hang_ranks.py:"), p.stdout
        assert "; rank 3 on jwb0002 in load_batch at hang_ranks.py:" in first, p.stdout
        assert "4 ranks on 2 nodes" in p.stdout
        assert cluster.run(["squeue", "-h", "-j", job_id]).stdout.strip()  # still running
    finally:
        cluster.run(["scancel", job_id])
        cluster.wait_gone(job_id, 120)
    if mode == "torchrun":  # the timeouts, computed on the cluster for its 2 nodes
        assert "rdzv_join_timeout=$((600 + 1 * nnodes))" in job.read_text()


def test_stacks_in_the_log_before_the_time_limit(cluster, shared_tmp):
    job = render(shared_tmp, "00:02:00", str(REPO / "tests/helpers/programs/hang_ranks.py"))
    res = cluster.run_job(str(job), ["-o", str(shared_tmp / "hang-%j.out")], timeout=300,
                          cwd=str(REPO))
    assert res.state == "TIMEOUT", res.output
    assert ": SIGURG at " in res.output, res.output
    assert "stacks: 3 ranks in all_reduce at hang_ranks.py:" in res.output, res.output
    assert " in load_batch at hang_ranks.py:" in res.output


def test_normal_job_has_no_stacks(cluster, shared_tmp):
    job = render(shared_tmp, "00:05:00", "examples/ddp_train.py")
    res = cluster.run_job(str(job), ["-o", str(shared_tmp / "ok-%j.out")], timeout=240,
                          cwd=str(REPO))
    assert res.state == "COMPLETED", res.output
    assert "stacks:" not in res.output and "SIGURG" not in res.output, res.output
    assert len(res.summaries) == 1, res.output
    files = sorted(p.name.split(".")[0] for p in (REPO / ".hangs" / res.job_id / "stacks").iterdir())
    assert files == ["rank-0", "rank-1", "rank-2", "rank-3"], files
