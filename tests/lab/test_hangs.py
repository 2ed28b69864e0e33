"""Ring 3: hang reports on the local JSC-like cluster.

A rendered spec (repository venv or image.sif; mode torchrun or srun; 2 nodes x 2) runs
tests/helpers/programs/hang_ranks.py: rank 3 sticks in its own function, ranks 0-2 wait for it in
all_reduce. Checked:
  - `jsc-compose stacks JOBID` from outside the allocation names the odd one out, the job
    still runs afterwards;
  - a minute before the time limit (--signal=B:URG@60) the job's log gets the same lines;
  - a job that does not hang finishes as before, with no stacks in its log, nothing left in
    .hangs, and a start-up timeline (`jsc-compose timeline JOBID`) of every phase on both nodes;
  - the rendezvous timeouts the jobscript computed reach torchrun (--rdzv_conf in the log);
  - with launch.hang_timeout the same hang ends the job long before its time limit (exit 124),
    its log has the stacks and, last, one line naming rank 3, its node and load_batch; a job
    that steps for longer than the deadline is not ended.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers import lanes
from tests.helpers.hangprog import STUCK
from tests.helpers.labjobs import make
from tests.lab.test_foreign_image import foreign_images

REPO = Path(__file__).resolve().parents[2]
PY = str(Path(os.environ.get("VENV", REPO / ".venv")) / "bin" / "python")

SPEC = """\
job:
  nodes: 2
  time: "{time}"
  partition: batch
{where}
env:
  set: {{READY_DIR: {ready}, PYTHONWARNINGS: ignore{env_extra}}}
launch:
  mode: {mode}
  procs_per_node: 2
{launch_extra}program: [python3, -u, {program}]
"""
VENV_SITE = "site:\n  profile: jsc\n  venv: .venv"
IMAGE_SITE = "site: jsc\nruntime:\n  kind: apptainer\n  image: image.sif"
ENROOT_SITE = "site: jsc\nruntime:\n  kind: enroot\n  image: image.sqsh"
PYXIS_SITE = "site: jsc\nruntime:\n  kind: pyxis\n  image: image.sqsh"
# Images the kit did not build (tests/lab/test_foreign_image.py): no kit, their own
# PYTHONPATH and an unrelated `launcher` package.
FOREIGN = {kind: f"site: jsc\nruntime:\n  kind: {kind}\n  image: build/foreign.{ext}"
           for kind, ext in (("apptainer", "sif"), ("enroot", "sqsh"), ("pyxis", "sqsh"))}
# Open MPI refuses root (the lab's jobs run as root) unless told
AS_ROOT = ", OMPI_ALLOW_RUN_AS_ROOT: '1', OMPI_ALLOW_RUN_AS_ROOT_CONFIRM: '1'"


def render(shared_tmp: Path, time_limit: str, program: str, mode: str = "torchrun",
           where: str = VENV_SITE, launch_extra: str = "", env_extra: str = "") -> Path:
    ready = shared_tmp / "ready"
    ready.mkdir(exist_ok=True)
    spec = shared_tmp / "hang.yaml"
    spec.write_text(SPEC.format(time=time_limit, ready=ready, program=program, mode=mode,
                                where=where, launch_extra=launch_extra, env_extra=env_extra))
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
    make("image")
    return REPO / "image.sif"


@pytest.fixture(scope="module")
def sqsh() -> Path:
    make("enroot-image")  # tests/lab/test_enroot.py says in one line when Enroot is missing
    return REPO / "image.sqsh"


# Every task of the lab carries PMIX_RANK and PMI_RANK (tests/lab/test_cluster.py), the per-node
# agents included; in mode mpirun_torchrun they carry OMPI_COMM_WORLD_RANK too (issue 26).
@pytest.mark.parametrize("mode, where, env_extra", [
    ("torchrun", VENV_SITE, ""), ("srun", VENV_SITE, ""), ("torchrun", IMAGE_SITE, ""),
    ("mpirun_torchrun", IMAGE_SITE, AS_ROOT), ("torchrun", ENROOT_SITE, ""),
    ("torchrun", PYXIS_SITE, ""), ("torchrun", FOREIGN["apptainer"], ""),
    ("srun", FOREIGN["enroot"], ""), ("torchrun", FOREIGN["pyxis"], "")],
    ids=["torchrun-venv", "srun-venv", "torchrun-apptainer", "mpirun_torchrun-apptainer",
         "torchrun-enroot", "torchrun-pyxis", "torchrun-foreign-apptainer",
         "srun-foreign-enroot", "torchrun-foreign-pyxis"])
def test_stacks_on_demand_names_the_stuck_rank(cluster, shared_tmp, request, mode, where,
                                               env_extra):
    if where in FOREIGN.values():
        foreign_images()
    if where == IMAGE_SITE:
        request.getfixturevalue("image")
    if where in (ENROOT_SITE, PYXIS_SITE):
        request.getfixturevalue("sqsh")
    job = render(shared_tmp, "00:05:00", str(REPO / "tests/helpers/programs/hang_ranks.py"), mode,
                 where, env_extra=env_extra)
    job_id = cluster.submit(str(job), ["-o", str(shared_tmp / "hang-%j.out")], cwd=str(REPO))
    try:
        wait_ready(shared_tmp / "ready", 4)
        p = stacks(job_id, time.monotonic() + 60)
        assert p.returncode == 0, p.stdout + p.stderr
        print(p.stdout)
        first = p.stdout.splitlines()[0]
        assert first.startswith("stacks: 3 ranks in all_reduce at hang_ranks.py:"), p.stdout
        second = lanes.job_nodes(job_id)[1]  # rank 3's (tests/helpers/lanes.py)
        assert f"; rank 3 on {second} in load_batch at hang_ranks.py:" in first, p.stdout
        assert "4 ranks on 2 nodes" in p.stdout
        assert cluster.run(["squeue", "-h", "-j", job_id]).stdout.strip()  # still running
    finally:
        cluster.run(["scancel", job_id])
        cluster.wait_gone(job_id, 120)
    if mode in ("torchrun", "mpirun_torchrun"):  # the timeouts, computed for its 2 nodes
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
    """... and leaves nothing in .hangs (issue 36: no hang report, so its directory is
    removed), while its start-up timeline (kept) has every phase of both nodes, each rank's
    marks from the kit's hook (so every rank was armed), and the picture."""
    job = render(shared_tmp, "00:05:00", "examples/ddp_train.py")
    res = cluster.run_job(str(job), ["-o", str(shared_tmp / "ok-%j.out")], timeout=240,
                          cwd=str(REPO))
    assert res.state == "COMPLETED", res.output
    assert "stacks:" not in res.output and "SIGURG" not in res.output, res.output
    assert len(res.summaries) == 1, res.output
    assert not (REPO / ".hangs" / res.job_id).exists()
    svg = shared_tmp / "timeline.svg"
    p = subprocess.run([PY, "-m", "launcher", "timeline", res.job_id, "--svg", str(svg)],
                       capture_output=True, text=True, timeout=60, cwd=REPO, check=False)
    print(p.stdout)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].startswith(f"timeline of job {res.job_id}: 2 nodes, batch script started "), \
        p.stdout
    first, second = lanes.hostnames(res.info["NodeList"])
    assert f" on {first}, launch ended after " in lines[0], p.stdout
    rows = {(line.split()[0], line[9:31].strip()) for line in lines[2:] if line.startswith("jwb")}
    for node in (first, second):  # 2 ranks each: both ranks' marks, every phase
        assert {(node, "container up"), (node, "torchrun_jsc decided"),
                (node, "rendezvous done"), (node, "workers started (2)"),
                (node, "process group up (2)"), (node, "first collective (2)")} <= rows, rows
    assert {(first, "batch start"), (first, "step start")} <= rows, rows
    assert [line.split(":")[0] for line in lines[-3:]] == ["slowest node", "slowest phase",
                                                           "picture"], p.stdout
    assert svg.read_text().count("<rect ") >= 2 * 7, svg.read_text()


DEADLINE_S = 130  # launch.hang_timeout: a little above the least it takes for 2 nodes (121 s)
PERIOD_S = 13  # a tenth of it: how often the ranks and the watcher look


@pytest.mark.parametrize("mode", ["torchrun", "srun"])
def test_progress_deadline_ends_the_job(cluster, shared_tmp, mode):
    """Rank 3 stops in load_batch after the first all_reduce, ranks 0-2 wait in the next one
    (gloo's default 30 min timeout): with launch.hang_timeout the job ends about DEADLINE_S
    after their last move, well before its 10 min time limit, and says who and where."""
    job = render(shared_tmp, "00:10:00", str(REPO / "tests/helpers/programs/hang_ranks.py"), mode,
                 launch_extra=f"  hang_timeout: {DEADLINE_S}\n")
    assert f"jsc_watch {DEADLINE_S} {PERIOD_S} 30\n" in job.read_text()
    res = cluster.run_job(str(job), ["-o", str(shared_tmp / "deadline-%j.out")], timeout=540,
                          cwd=str(REPO))
    print(res.output)
    assert res.state == "FAILED" and res.exit_code.startswith("124:"), \
        (res.state, res.exit_code, res.output)
    # Start-up, the deadline, two looks of 13 s, the stacks and the end: minutes below 10.
    assert DEADLINE_S < res.elapsed_s < 360, res.elapsed_s
    out = res.output
    assert f"(launch.hang_timeout {DEADLINE_S}) at " in out, out
    assert "stacks: 3 ranks in all_reduce at hang_ranks.py:" in out, out
    second = lanes.hostnames(res.info["NodeList"])[1]
    assert f"; rank 3 on {second} in load_batch at hang_ranks.py:" in out, out
    last = [line for line in out.splitlines() if line.startswith("no progress for ")]
    assert last == [f"no progress for {DEADLINE_S} s: rank 3 on {second} in load_batch at "
                    f"{STUCK}, 1 collective behind the other 3; job ended"], out
    assert "SIGURG" not in out  # ended by the deadline, not warned by the time limit
    assert (REPO / ".hangs" / res.job_id / "no-progress").read_text() == last[0] + "\n"


def run_reading_marks(cluster, job: Path, out: Path, timeout: float):
    """The job run as cluster.run_job does, its progress marks read while it runs (the job
    removes its .hangs/JOBID when it ends without a hang report, issue 36): the result and the
    last reading that had every rank."""
    from launcher.node import stacks as node_stacks

    start = time.monotonic()
    job_id = cluster.submit(str(job), ["-o", str(out)], cwd=str(REPO))
    marks: dict = {}
    deadline = start + timeout
    while cluster.run(["squeue", "-h", "-j", job_id]).stdout.strip():
        assert time.monotonic() < deadline, f"job {job_id} still running after {timeout} s"
        seen = node_stacks.read_marks(str(REPO / ".hangs" / job_id))
        if len([r for r in seen if isinstance(r, int)]) == 4:
            marks = seen
        time.sleep(0.5)
    info = cluster.job_info(job_id)
    res = cluster.JobResult(job_id=job_id, state=info.get("JobState", "?"),
                            exit_code=info.get("ExitCode", "?"),
                            num_nodes=int(info.get("NumNodes", "0")),
                            elapsed_s=time.monotonic() - start,
                            output=cluster.collect_output(job_id, info, str(REPO)), info=info)
    return res, marks


def test_progress_deadline_leaves_a_stepping_job_alone(cluster, shared_tmp):
    """A job that steps for longer than the deadline (400 steps of 0.5 s, collectives in
    every step's backward) finishes and no line is printed; every rank's mark, read while the
    job runs, holds about the same count of collectives (ddp_train.py ends with os._exit, so
    atexit's "done" mark is not written: the watcher stops with the launch, not on the marks);
    the marks are one file per node, and gone with the job (no hang report)."""
    job = render(shared_tmp, "00:10:00", "examples/ddp_train.py, --steps, '400', --step-sleep, "
                 "'0.5'",
                 launch_extra=f"  hang_timeout: {DEADLINE_S}\n")
    res, marks = run_reading_marks(cluster, job, shared_tmp / "steps-%j.out", 540)
    assert res.state == "COMPLETED", res.output
    assert res.elapsed_s > DEADLINE_S + 60, res.elapsed_s  # it did outlast the deadline
    assert "no progress" not in res.output and "stacks:" not in res.output, res.output
    assert not (REPO / ".hangs" / res.job_id).exists()
    assert sorted(marks) == [0, 1, 2, 3] and not any(m["done"] for m in marks.values()), marks
    counts = [m["world"] for m in marks.values()]
    assert min(counts) > 300, marks  # the backward's collectives counted (2 per step)
    # Every rank issued as many collectives, but each mark is its count at the thread's last
    # look (every 13 s, the ranks' looks nearly together), read at any moment: the counts may
    # differ by what two seconds of steps issue, not more (a rank whose backward went
    # uncounted would be hundreds behind).
    stepping = max(m["t"] for m in marks.values()) - cluster.slurm_time(res.info["StartTime"])
    per_second = max(counts) / stepping  # start-up included: a little less than the rate
    assert max(counts) - min(counts) <= 2 * per_second + 1, (marks, per_second)
