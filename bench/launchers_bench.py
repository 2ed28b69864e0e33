"""Bench section `launchers`: every launch mode from sbatch to its first all_reduce.

2 nodes x 2 processes, bare (the project venv, so only the launcher differs), the same
program in every row: examples/distributed_sum.py (under Ray: examples/ray_sum.py, which
runs it in one Ray actor per slot). Time = rank 0's `t_allreduce` (when it came out of the
first all_reduce, which every rank had entered) minus the time of sbatch; the floor is
srun mode (srun starts the ranks itself, no launcher process), measured in the same run,
rounds interleaved. submitit: executor.submit of examples/submitit_sum.py's function with a
bare spec of the same geometry, to the latest rank's all_reduce.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Dict, Optional

from bench.cluster_bench import ROOT, slurmjob
from bench.stats import interleave, ratio, table
from bench.jobs import compose

SUM = ["python3", "-u", "examples/distributed_sum.py"]
RAY_SUM = ["python3", "-u", "examples/ray_sum.py"]
MODES = {  # row -> (mode, program)
    "srun + env:// (floor)": ("srun", SUM),
    "torchrun (torchrun_jsc)": ("torchrun", SUM),
    "accelerate launch": ("accelerate", SUM),
    "deepspeed (--no_ssh)": ("deepspeed", SUM),
    "ray (head, workers, driver)": ("ray", RAY_SUM),
}


def render(mode: str, program: list) -> str:
    out_dir = ROOT / "bench-results" / "jobs"
    prog = ", ".join(f"'{a}'" for a in program)
    spec = (f"job: {{name: bench_sum_{mode}, nodes: 2, time: '00:10:00', "
                    f"partition: batch, node_output: null}}\n"
                    f"site:\n  profile: jsc\n  venv: .venv\n"
                    f"launch: {{mode: {mode}, procs_per_node: 2}}\nprogram: [{prog}]\n")
    job = out_dir / f"bench_sum_{mode}.job"
    job.write_text(compose(f"bench_sum_{mode}", spec))
    return str(job.relative_to(ROOT))


def first_allreduce_s(jobfile: str) -> Optional[float]:
    start = time.time()
    job_id = slurmjob.submit(jobfile, cwd=str(ROOT))
    slurmjob.wait_gone(job_id, 300)
    out = slurmjob.collect_output(job_id, slurmjob.job_info(job_id), str(ROOT))
    for line in out.splitlines():
        if "SUM_SUMMARY " in line:
            summary = json.loads(line.split("SUM_SUMMARY ", 1)[1])
            if summary.get("ok") and summary.get("world_size") == 4:
                return float(summary["t_allreduce"]) - start
    print(f"bench: {jobfile}: no good SUM_SUMMARY\n{out[-2000:]}", file=sys.stderr)
    return None


def submitit_s() -> Optional[float]:
    """executor.submit(distributed_sum) of examples/submitit_sum.py -> rank 0's all_reduce,
    with a bare spec of the same geometry (submitit writes and submits its own sbatch file)."""
    sys.path.insert(0, str(ROOT / "examples"))
    import cloudpickle
    import submitit_sum  # noqa: E402  (examples/submitit_sum.py)

    cloudpickle.register_pickle_by_value(submitit_sum)  # the nodes cannot import examples/

    from launcher.submitit import executor_for

    spec = ROOT / "bench-results" / "jobs" / "bench_sum_submitit.yaml"
    spec.write_text("job: {nodes: 2, time: '00:10:00', partition: batch}\nsite: jsc\n"
                    "launch: {mode: srun, procs_per_node: 2}\nprogram: [python3]\n")
    executor = executor_for(str(spec), str(ROOT / "bench-results" / "submitit" / "%j"))
    start = time.time()
    job = executor.submit(submitit_sum.distributed_sum)
    if not submitit_sum.wait(job, 300) or submitit_sum.missing_results(job):
        print(f"bench: submitit job {job.job_id}: no results", file=sys.stderr)
        return None
    results = job.results()
    if len(results) != 4 or not all(r["ok"] for r in results):
        print(f"bench: submitit job {job.job_id}: {results}", file=sys.stderr)
        return None
    return max(r["t_allreduce"] for r in results) - start


def launchers(repeats: int) -> str:
    jobs: Dict[str, str] = {row: render(mode, prog) for row, (mode, prog) in MODES.items()}
    runs = {k: (lambda j=j: first_allreduce_s(j)) for k, j in jobs.items()}
    runs["submitit (executor.submit)"] = submitit_s
    s = interleave(runs, repeats)
    floor = s["srun + env:// (floor)"]
    rows = [[k, v.cell("s"), ratio(v, floor)] for k, v in s.items()]
    return table(["2 nodes x 2 procs, bare, sbatch -> first all_reduce", "time", "vs floor"],
                 rows)
