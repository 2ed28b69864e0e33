"""Bench sections on the local Slurm cluster (scripts/cluster.sh): launch and teardown.

Jobscripts are rendered by the composer from specs built here (the same code path as
jobs/*.job), into bench-results/jobs/, and submitted from the repository root.

- launch: sbatch -> every rank past init_process_group and a first all_reduce,
  2 nodes x 2 processes, for srun + env:// (the floor), torchrun_jsc bare (venv) and
  torchrun_jsc in apptainer. Plain torchrun with a hostname endpoint cannot work on this
  JSC-like network (that is the bug); the namespace scaling section compares with it where
  it does work.
- teardown: one rank (on the second node) exits 3 after the first all_reduce while the others
  compute for 30 s before their next collective;
  time from its CRASH line to the job leaving the queue, for the rendered script and for the
  same script without `--kill-on-bad-exit=1` (what a naive jobscript does), capped.
- placement: a compute-bound step (2 nodes x 2 processes, one thread each) with the rendered
  script (whole nodes, SRUN_CPUS_PER_TASK = the node's CPUs) and with the script as it was
  before (no CPU request: Slurm binds the one torchrun_jsc task per node, and so all its
  workers, to one core).
- requeue: a job.requeue job (apptainer, torchrun) preempted once with `scancel -b
  --signal=USR2` while its ranks step: signal -> checkpoint written and `scontrol requeue`,
  and signal -> the job RUNNING again. The second figure is mostly Slurm's hold of a requeued
  job (about cred_expire, 120 s); the start time is not moved, unlike in the tests.
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path
from typing import Dict, Optional, Sequence

from bench.stats import interleave, ratio, seconds_to_ready, table
from bench.jobs import compose

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts" / "cluster"))
import slurmjob  # noqa: E402  (scripts/cluster/slurmjob.py: submit, poll squeue)

PROGRAM = ["python3", "-u", "bench/programs/ready.py"]
NAIVE_CAP_S = 60.0


def spec_yaml(name: str, mode: str, runtime: str, program: Sequence[str]) -> str:
    rt = "runtime: {kind: apptainer, image: image.sif}" if runtime == "apptainer" else ""
    venv = "  venv: .venv\n" if runtime == "bare" else ""
    prog = ", ".join(f"'{a}'" for a in program)
    return (f"job: {{name: {name}, nodes: 2, time: '00:10:00', partition: batch}}\n"
            f"site:\n  profile: jsc\n{venv}{rt}\n"
            f"launch: {{mode: {mode}, procs_per_node: 2}}\nprogram: [{prog}]\n")


def render(name: str, mode: str, runtime: str, program: Sequence[str] = PROGRAM,
           naive: bool = False, one_cpu: bool = False) -> str:
    out_dir = ROOT / "bench-results" / "jobs"
    text = compose(name, spec_yaml(name, mode, runtime, program))
    if naive:  # the one thing a naive jobscript lacks: ending the job when a task fails
        text = text.replace("--kill-on-bad-exit=1 ", "")
    if one_cpu:  # the script before CPU placement: no CPU request, so one CPU per node
        assert "#SBATCH --exclusive\n" in text
        text = text.replace("#SBATCH --exclusive\n", "")
    job = out_dir / f"{name}.job"
    job.write_text(text)
    return str(job.relative_to(ROOT))


def _output(job_id: str) -> str:
    return slurmjob.collect_output(job_id, slurmjob.job_info(job_id), str(ROOT))


def launch_s(jobfile: str) -> Optional[float]:
    start = time.time()
    job_id = slurmjob.submit(jobfile, cwd=str(ROOT))
    slurmjob.wait_gone(job_id, 300)
    out = _output(job_id)
    elapsed = seconds_to_ready(out, start, 4)
    if elapsed is None:
        print(f"bench: {jobfile}: not all 4 ranks ready\n{out[-2000:]}", file=sys.stderr)
    return elapsed


def teardown_s(jobfile: str, cap: float) -> Optional[float]:
    """CRASH line -> job gone from the queue; None if still there at the cap (then cancelled)."""
    job_id = slurmjob.submit(jobfile, cwd=str(ROOT))
    try:
        slurmjob.wait_gone(job_id, cap + 30, poll=0.1)  # cancels the job on timeout
    except slurmjob.JobError:
        return None
    gone = time.time()
    m = re.search(r"CRASH t=([\d.]+)", _output(job_id))
    if not m:
        print(f"bench: {jobfile}: no CRASH line", file=sys.stderr)
        return None
    return gone - float(m.group(1))


def launch(repeats: int) -> str:
    jobs: Dict[str, str] = {
        "srun + env:// (floor)": render("bench_srun", "srun", "bare"),
        "torchrun_jsc, bare": render("bench_torchrun_jsc", "torchrun", "bare"),
        "torchrun_jsc, apptainer": render("bench_torchrun_jsc_apptainer", "torchrun",
                                          "apptainer"),
    }
    s = interleave({k: (lambda j=j: launch_s(j)) for k, j in jobs.items()}, repeats)
    floor = s["srun + env:// (floor)"]
    rows = [[k, v.cell("s"), ratio(v, floor)] for k, v in s.items()]
    rows.insert(1, ["plain torchrun, hostname endpoint", "fails on this JSC-like network "
                    "(the bug); compared where it works in the scaling section", "n/a"])
    bare, app = s["torchrun_jsc, bare"], s["torchrun_jsc, apptainer"]
    extra = (f"\nContainer cost per node: {(app.median - bare.median):.2f} s "
             "(median apptainer - median bare; both nodes start in parallel)."
             if bare.values and app.values else "")
    return table(["2 nodes x 2 procs, sbatch -> first all_reduce", "time", "vs floor"],
                 rows) + extra


def teardown(repeats: int) -> str:
    # Rank 3 lives on the second node (ranks follow the nodes' sorted addresses), so the
    # node that hosts the rendezvous store survives the crash: the case torchrun alone does
    # not notice until the survivors' next collective.
    crash = [*PROGRAM, "--crash-rank", "3"]
    ours = render("bench_crash", "torchrun", "bare", crash)
    naive = render("bench_crash_naive", "torchrun", "bare", crash, naive=True)
    s = interleave({"ours": lambda: teardown_s(ours, NAIVE_CAP_S),
                    "naive": lambda: teardown_s(naive, NAIVE_CAP_S)}, repeats)
    naive_cell = s["naive"].cell("s") if len(s["naive"].values) == repeats else \
        f"{repeats - len(s['naive'].values)} of {repeats} runs hung > {NAIVE_CAP_S:.0f} s (cancelled)"
    return table(["rank 3 (node 2) exits 3 after its first all_reduce", "crash -> job gone"],
                 [["rendered jobscript (srun --kill-on-bad-exit=1)", s["ours"].cell("s")],
                  ["naive: same script without --kill-on-bad-exit", naive_cell]])


def work_s(jobfile: str) -> Optional[float]:
    job_id = slurmjob.submit(jobfile, cwd=str(ROOT))
    slurmjob.wait_gone(job_id, 300)
    m = re.search(r"WORK s=([\d.]+)", _output(job_id))
    if not m:
        print(f"bench: {jobfile}: no WORK line", file=sys.stderr)
    return float(m.group(1)) if m else None


def placement(repeats: int, steps: int = 400) -> str:
    work = [*PROGRAM, "--work-steps", str(steps)]
    new = render("bench_placement", "torchrun", "bare", work)
    old = render("bench_placement_one_cpu", "torchrun", "bare", work, one_cpu=True)
    s = interleave({"new": lambda: work_s(new), "old": lambda: work_s(old)}, repeats)
    return table([f"{steps} compute-bound steps, 2 nodes x 2 procs", "time", "ratio"],
                 [["rendered script (whole nodes, every CPU to torchrun_jsc)",
                   s["new"].cell("s"), "1.00x"],
                  ["before: no CPU request (the task, and so every worker, on one core)",
                   s["old"].cell("s"), ratio(s["old"], s["new"])]])


def requeue_s(jobfile: str, out: Path, ckpt: Path) -> Optional[Dict[str, float]]:
    """Preempt once (scancel -b --signal=USR2) while the ranks step; seconds from the signal
    to the job requeued by its script and to the job RUNNING again (real Slurm hold: the
    start time is not moved). The job is cancelled once it runs again."""
    import shutil

    shutil.rmtree(ckpt, ignore_errors=True)
    out.unlink(missing_ok=True)
    job_id = slurmjob.submit(jobfile, ["-J", "rq-bench", "-o", str(out)], cwd=str(ROOT))
    deadline, signalled, running = time.monotonic() + 600, False, None
    try:
        while time.monotonic() < deadline:
            info = slurmjob.job_info(job_id)
            text = out.read_text() if out.exists() else ""
            if not signalled and re.search(r"^step \d+ ", text, re.M):
                slurmjob.run(["scancel", "-b", "--signal=USR2", job_id])
                signalled = True
            if signalled and info.get("Restarts") == "1" and info.get("JobState") == "RUNNING":
                running = time.time()
                break
            if info.get("JobState") in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"):
                break
            time.sleep(0.2)
    finally:
        slurmjob.run(["scancel", job_id])
    text = out.read_text() if out.exists() else ""
    sig = re.search(r"SIGUSR2 at ([\d.]+)", text)
    req = re.search(r"requeued at ([\d.]+)", text)
    if running is None or not sig or not req:
        print(f"bench: requeue job {job_id}: not running again\n{text[-2000:]}", file=sys.stderr)
        return None
    return {"requeued": float(req.group(1)) - float(sig.group(1)),
            "running": running - float(sig.group(1))}


def requeue(repeats: int) -> str:
    out_dir = ROOT / "bench-results" / "jobs"
    ckpt = ROOT / "bench-results" / "requeue-ckpt"
    spec = (
        "job: {name: rq-bench, nodes: 2, time: '00:05:00', partition: batch, node_output: null,"
        " requeue: {signal: USR2, before: 60, max: 1}}\n"
        "site: jsc\nruntime: {kind: apptainer, image: image.sif}\nlaunch: {mode: torchrun}\n"
        "program: [python3, -u, examples/ddp_train.py, --steps, '100000', --step-sleep, '0.1',"
        f" --checkpoint-dir, {ckpt.relative_to(ROOT)}, --checkpoint-every, '20']\n")
    job = out_dir / "bench_requeue.job"
    job.write_text(compose("bench_requeue", spec))
    runs = [requeue_s(str(job.relative_to(ROOT)), out_dir / "bench_requeue.out", ckpt)
            for _ in range(repeats)]
    ok = [r for r in runs if r]
    from bench.stats import Series

    req = Series("requeued", [r["requeued"] for r in ok])
    run = Series("running", [r["running"] for r in ok])
    return table(["2 nodes x 2 procs (apptainer, torchrun), preempted once", "time"],
                 [["signal -> ranks checkpointed, script ran scontrol requeue", req.cell("s")],
                  ["signal -> job RUNNING again (includes Slurm's hold of a requeued job)",
                   run.cell("s")]])
