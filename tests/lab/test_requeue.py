"""Ring 3: job.requeue on the local cluster: time limit, preemption, failure, maximum.

Each job runs examples/ddp_train.py (2 nodes x 2 ranks) from its own shared directory (a copy
of the program, the image linked), so its checkpoint and .requeue/ are fresh. The checks read
what the program printed: one DDP_STOPPED line per interrupted attempt and the final
DDP_SUMMARY, whose steps must chain (each attempt resumes where the last stopped), add up to
--steps exactly, and end with the parameters of an uninterrupted run (param_sha256).

Slurm holds a requeued job for the credential lifetime (cred_expire, 120 s) before it may
start again; the tests move its start to now (scontrol update StartTime=now) to stay short.
bench/cluster_bench.py (requeue) measures the real delay.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Dict, List, Optional

import pytest
import yaml

from launcher.render.jobscript import render_jobscript
from launcher.spec import parse_spec
from tests.helpers import lanes
from tests.helpers.labjobs import job_fields, make, release_requeue_hold

REPO = Path(__file__).resolve().parents[2]
TIMEOUT_S = 240


@pytest.fixture
def lab(request: pytest.FixtureRequest) -> None:
    """The cluster (the session's `cluster` fixture brings it up), unless JWB_LAB_SHARED=1: a
    cluster someone else runs, which these tests must not restart; then it must be up."""
    if os.environ.get("JWB_LAB_SHARED") == "1":
        assert sh("sinfo", "-h"), "JWB_LAB_SHARED=1 but sinfo shows no cluster"
    else:
        request.getfixturevalue("cluster")


@pytest.fixture(scope="module", autouse=True)
def image_sif() -> None:
    """image.sif, built by the project's own target (never left to an earlier test file)."""
    make("image")


def workdir(base: Path) -> Path:
    (base / "examples").mkdir(parents=True)
    shutil.copy(REPO / "examples" / "ddp_train.py", base / "examples")
    (base / "image.sif").symlink_to(REPO / "image.sif")
    # The checked-in jobscripts name the kit relative to the submit directory (the clone's
    # root): here, the clone's.
    (base / "launcher").symlink_to(REPO / "launcher")
    return base


def sh(*argv: str, cwd: Optional[Path] = None) -> str:
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, cwd=cwd,
                          check=False).stdout


def run(job: Path, cwd: Path, name: str, sbatch: List[str] = (),
        preempt: bool = False, preemptor: Optional[List[str]] = None,
        timeout_s: float = TIMEOUT_S) -> Dict[str, object]:
    """Submit, follow through every requeue, return scontrol's info and the output.
    preempt: `scancel -b --signal=USR2` once per attempt after its first step. preemptor:
    sbatch arguments of a job in a higher partition, submitted once, after the first step:
    Slurm itself preempts (the lab's PreemptType=preempt/partition_prio)."""
    out = cwd / f"{name}.out"
    job_id = sh("sbatch", "--parsable", "-J", name, "-o", str(out), *sbatch, str(job),
                cwd=cwd).strip()
    assert job_id, f"sbatch failed for {job}"
    deadline, signalled, held = time.monotonic() + timeout_s, set(), {}
    while sh("squeue", "-h", "-j", job_id).strip():
        assert time.monotonic() < deadline, f"job {job_id} still queued: {out.read_text()}"
        i = job_fields(job_id)
        release_requeue_hold(job_id, i, held)
        attempt = i.get("Restarts", "0")
        text = out.read_text() if out.exists() else ""
        current = text.partition(f"attempt {int(attempt) + 1},")[2]
        if preempt and attempt not in signalled and re.search(r"^step \d+ ", current, re.M):
            sh("scancel", "-b", "--signal=USR2", job_id)  # a preemption, as the site does
            signalled.add(attempt)
        if preemptor and not signalled and re.search(r"^step \d+ ", current, re.M):
            urgent = sh("sbatch", "--parsable", *preemptor, cwd=cwd).strip()
            assert urgent, f"the preemptor was not submitted: {preemptor}"
            signalled.add(urgent)
        time.sleep(0.5)
    i = job_fields(job_id)
    text = out.read_text()
    print(f"{name}: job {job_id} {i['JobState']} exit {i['ExitCode']} restarts {i['Restarts']}")
    return {"id": job_id, "state": i["JobState"], "exit": i["ExitCode"],
            "restarts": int(i["Restarts"]), "output": text}


def lines(output: str, prefix: str) -> List[dict]:
    return [json.loads(line.split(prefix, 1)[1]) for line in output.splitlines()
            if line.startswith(prefix)]


EARLY = "no new checkpoint: ranks ended by SIGUSR2 before their handler was set"


def check_chain(output: str, steps: int, final: Optional[dict]) -> List[dict]:
    """Every attempt resumes where the last stopped; steps run add up to exactly ``steps``.
    An attempt signalled before its launcher could catch the signal (the script prints EARLY
    and requeues) ran no step: the next one resumes where the one before stopped."""
    attempts = lines(output, "DDP_STOPPED ") + ([final] if final else [])
    early = {int(m) for m in re.findall(r"attempt (\d+),(?:(?!attempt \d+,).)*?" + EARLY,
                                       output, re.S)}
    done, k = 0, 1
    for a in attempts:
        while k in early:
            k += 1
        assert a["attempt"] == k and a["resumed_from_step"] == done, (early, attempts)
        k += 1
        assert a["steps_run"] == a["steps"] - done and a["params_identical"], attempts
        done = a["steps"]
    if final:
        assert done == steps and not final["stopped"], attempts
    return attempts


def test_checked_in_job_outlives_its_time_limit(lab, shared_tmp):
    """jobs/ddp_requeue.job: 1-minute attempts, SIGUSR2 20 s before the limit. 100 steps of
    0.4 s (40 s) never fit the first attempt's 40 s with the start. On the lab under CI load an
    attempt ran 11 to 29 steps, and 1 while an image built at full priority (run 8, out of 5
    requeues; builds run at nice 10 since): max 8 leaves room for a few such attempts."""
    steps = 100
    job = REPO / "jobs/ddp_requeue.job"
    # every attempt the job may make: a 1-minute limit, the requeue and the start (CI run 11:
    # 9 attempts did not fit in the 240 s of the other tests)
    most = int(re.search(r"^jsc_requeue_setup \S+ (\d+)", job.read_text(), re.M)[1]) + 1
    limited = run(job, workdir(shared_tmp / "a"), "rq-limit", timeout_s=most * 90)
    assert limited["state"] == "COMPLETED" and limited["restarts"] >= 1, limited["output"]
    [final] = lines(limited["output"], "DDP_SUMMARY ")
    attempts = check_chain(limited["output"], steps, final)
    print("steps per attempt:", [a["steps_run"] for a in attempts])
    assert "torchrun_jsc: SIGUSR2 received, forwarded to workers" in limited["output"]

    whole = run(job, workdir(shared_tmp / "b"), "rq-whole",
                ["--time=00:03:00"])
    assert whole["state"] == "COMPLETED" and whole["restarts"] == 0, whole["output"]
    [alone] = lines(whole["output"], "DDP_SUMMARY ")
    check_chain(whole["output"], steps, alone)
    print("param_sha256 requeued", final["param_sha256"], "uninterrupted", alone["param_sha256"])
    assert final["param_sha256"] == alone["param_sha256"], (final, alone)


def render(base: Path, mode: str, program_args: List[str], max_: int) -> Path:
    data = {"job": {"nodes": 2, "time": "00:05:00", "partition": "batch", "gpus_per_node": 2,
                    "node_output": None, "requeue": {"before": 60, "max": max_}},
            "site": "jsc", "runtime": {"kind": "apptainer", "image": "image.sif"},
            "launch": {"mode": mode},
            "program": ["python3", "-u", "examples/ddp_train.py", "--checkpoint-dir", "ckpt",
                        *program_args]}
    job = base / f"{mode}.job"
    job.write_text(render_jobscript(parse_spec(yaml.safe_dump(data), f"{mode}.yaml")))
    return job


def test_srun_mode_preempted_twice_stops_at_the_maximum(lab, shared_tmp):
    """srun mode, preempted by `scancel -b --signal=USR2` in each attempt, max 1: the first
    preemption requeues, the second checkpoints and ends the job with 75, not requeued."""
    base = workdir(shared_tmp)
    job = render(base, "srun", ["--steps", "400", "--step-sleep", "0.1",
                                "--checkpoint-every", "5"], max_=1)
    res = run(job, base, "rq-preempt", preempt=True)
    out = res["output"]
    assert res["state"] == "FAILED" and res["exit"] == "75:0" and res["restarts"] == 1, out
    attempts = check_chain(out, 400, None)
    assert len(attempts) == 2 and attempts[-1]["steps"] < 400, attempts
    assert "requeued 1 times already (job.requeue.max)" in out


def test_real_preemption_checkpoints_now_and_resumes(lab, shared_tmp):
    """A job in the lab's `urgent` partition (PriorityTier 2) needs every node: Slurm preempts
    the requeue job in `batch` (PreemptMode=REQUEUE, GraceTime=60), and with
    PreemptParameters=send_user_signal it sends the job's own --signal (B:USR2) at once. The
    trap passes it on, the ranks checkpoint at the next step, the script ends and leaves the
    requeue to Slurm (one of its own on top made Slurm requeue twice), the urgent job runs,
    and the job resumes where it stopped and completes."""
    base = workdir(shared_tmp)
    job = render(base, "torchrun", ["--steps", "200", "--step-sleep", "0.2",
                                    "--checkpoint-every", "20"], max_=2)
    urgent_out = base / "urgent.out"
    res = run(job, base, "rq-preempted", preemptor=[
        "-p", "urgent", f"-N{len(lanes.all_nodes())}", "--exclusive", "--time=1", "-o", str(urgent_out),
        "--wrap", "echo URGENT_RAN $(hostname)"])
    out = res["output"]
    assert res["state"] == "COMPLETED" and res["restarts"] == 1, out
    assert re.search(r"SIGUSR2 at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d \S+, passed on to every rank",
                     out), out
    assert "preempted: Slurm requeues it (PreemptMode=REQUEUE)" in out, out
    assert not re.search(r"requeued at \d", out), out
    [stopped] = lines(out, "DDP_STOPPED ")  # saved at the preemption (the first after step 20)
    assert 20 < stopped["steps"] < 200 and stopped["stopped"], stopped
    [final] = lines(out, "DDP_SUMMARY ")
    check_chain(out, 200, final)
    assert "URGENT_RAN" in urgent_out.read_text()


def test_failing_program_is_not_requeued(lab, shared_tmp):
    base = workdir(shared_tmp)
    job = render(base, "torchrun", ["--steps", "400", "--crash-rank", "1",
                                    "--crash-step", "3"], max_=3)
    res = run(job, base, "rq-fail")
    out = res["output"]
    assert res["state"] == "FAILED" and res["restarts"] == 0, out
    assert "rank 1: crashing on purpose at step 3" in out
    assert "not requeued" in out and not re.search(r"requeued at \d", out)
    assert lines(out, "DDP_STOPPED ") == [] and lines(out, "DDP_SUMMARY ") == []
