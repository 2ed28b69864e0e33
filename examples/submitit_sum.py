"""The distributed sum, submitted from Python with submitit and a job spec.

    python examples/submitit_sum.py [--spec jobs/sum_submitit.yaml] [--folder build/submitit/%j]

``launcher.submitit.executor_for`` turns the spec into a submitit executor: the function
below runs as job.nodes x launch.procs_per_node Slurm tasks, inside the spec's container,
with RANK, WORLD_SIZE, MASTER_ADDR (the first node's inter-node name) and MASTER_PORT set,
so plain ``init_process_group("env://")`` works. Each rank adds rank + 1 with an all_reduce
and returns what it saw; ``job.results()`` brings the returns back (rank order). Prints one
line per rank and then

    SUBMITIT_SUM {"job_id": "...", "world_size": 4, "sum": 10, "expected": 10, "ok": true, ...}

and exits 1 if any rank's sum is not n(n+1)/2 (or the job failed). The spec's image needs
submitit (launchers.sif has it: make launchers-image); bare specs use this Python.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

REPO = Path(__file__).resolve().parent.parent
SUMMARY_PREFIX = "SUBMITIT_SUM "


def distributed_sum() -> Dict[str, Any]:
    """Runs in every task: rank + 1, all_reduce, check n(n+1)/2 (gloo, or nccl with CUDA)."""
    import datetime
    import socket

    import torch
    import torch.distributed as dist

    try:  # every rank of a kit job has it (the kit's hook folder), as has an install of the kit
        from torchrun_jsc_kit import select_device
    except ImportError:  # run by hand from a clone: the clone's, beside this example
        sys.path.append(str(REPO / "launcher" / "task" / "hook"))
        from torchrun_jsc_kit import select_device

    device = select_device(torch)  # cuda:0 or cuda:LOCAL_RANK; never a silent CPU run
    cuda = device.type == "cuda"
    backend = "nccl" if cuda else "gloo"
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group(backend, init_method="env://",
                            timeout=datetime.timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    total = torch.tensor([rank + 1], dtype=torch.int64, device=device)
    dist.all_reduce(total)
    passed = time.time()  # every rank has contributed once this returns (make bench)
    dist.destroy_process_group()
    expected = world * (world + 1) // 2
    return {"rank": rank, "local_rank": int(os.environ["LOCAL_RANK"]), "world_size": world,
            "sum": int(total.item()), "expected": expected, "ok": int(total.item()) == expected,
            "backend": backend, "host": socket.gethostname(),
            "master_addr": os.environ["MASTER_ADDR"],
            "gloo_socket_ifname": os.environ.get("GLOO_SOCKET_IFNAME", ""),
            # The images install torch with the system's pip; a bare run has the venv's.
            "in_container": os.path.exists("/.singularity.d") and torch.__file__.startswith("/usr/"),
            "torch": torch.__version__, "t_allreduce": round(passed, 6)}


def wait(job: Any, timeout: float) -> bool:
    """Until the job left Slurm's queue (squeue); False after ``timeout`` seconds. submitit's
    own job.wait() asks sacct, and on a cluster without accounting it would wait forever
    for a job that failed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        queued = subprocess.run(["squeue", "-h", "-j", str(job.job_id), "-o", "%T"],
                                capture_output=True, text=True, check=False).stdout.strip()
        if not queued:
            return True
        time.sleep(1)
    return False


def missing_results(job: Any) -> List[int]:
    """The tasks that wrote no result (they failed before or outside the function)."""
    return [i for i in range(job.num_tasks) if not job.task(i).paths.result_pickle.exists()]


def main(argv: List[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--spec", default=str(REPO / "jobs/sum_submitit.yaml"))
    p.add_argument("--folder", default=str(REPO / "build/submitit/%j"),
                   help="submitit's folder, on a file system every node sees")
    p.add_argument("--timeout", type=float, default=600, help="seconds to wait for the job")
    args = p.parse_args(argv)

    sys.path.insert(0, str(REPO))
    from launcher.model import SpecError
    from launcher.submitit import executor_for

    try:
        executor = executor_for(args.spec, args.folder)
    except (SpecError, ValueError, ImportError) as exc:
        print(f"submitit_sum: {exc}", file=sys.stderr)
        return 2
    job = executor.submit(distributed_sum)
    print(f"submitted job {job.job_id} (folder {job.paths.folder})", flush=True)
    if not wait(job, args.timeout):
        job.cancel(check=False)
        print(f"submitit_sum: job {job.job_id} did not finish in {args.timeout:.0f} s; "
              "cancelled", file=sys.stderr)
        return 1
    missing = missing_results(job)
    if missing:
        log = (job.task(missing[0]).stderr() or "").strip().splitlines()
        print(f"submitit_sum: job {job.job_id}: task(s) {missing} returned nothing; last "
              f"line of task {missing[0]}'s log: {log[-1] if log else '(empty)'} "
              f"(logs: {job.paths.folder})", file=sys.stderr)
        return 1
    try:
        results = job.results()
    except Exception as exc:  # submitit re-raises the task's error with its log paths
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"submitit_sum: job {job.job_id} failed: {first} (logs: {job.paths.folder})",
              file=sys.stderr)
        return 1
    for r in results:
        print(f"rank {r['rank']}/{r['world_size']} on {r['host']}: sum {r['sum']} "
              f"(expected {r['expected']}) via {r['master_addr']} {r['gloo_socket_ifname']}")
    ok = bool(results) and all(r["ok"] for r in results)
    first = results[0] if results else {}
    summary = {"job_id": str(job.job_id), "world_size": first.get("world_size"),
               "sum": first.get("sum"), "expected": first.get("expected"), "ok": ok,
               "ranks": [r["rank"] for r in results], "backend": first.get("backend"),
               "hosts": sorted({r["host"] for r in results}),
               "master_addr": first.get("master_addr"),
               "in_container": all(r["in_container"] for r in results)}
    print(SUMMARY_PREFIX + json.dumps(summary, sort_keys=True), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
