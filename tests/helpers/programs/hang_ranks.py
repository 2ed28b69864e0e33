"""Test program: one rank gets stuck in its own function, the others wait for it in
all_reduce. Each rank touches READY_DIR/rank-R once it is where it stays.

Defaults (the lab's tests): 4 gloo ranks, rank 3 stuck, the process group's default timeout.
HANG_RANK, HANG_BACKEND (nccl: each rank on cuda:LOCAL_RANK modulo the visible GPUs) and
HANG_PG_TIMEOUT_S (seconds) change them (scripts/gpu-check.py: NCCL's watchdog and its flight
recorder).
"""

import datetime
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist


def load_batch(ready: Path) -> None:
    ready.touch()
    time.sleep(600)  # stuck: the odd one out


def main() -> None:
    backend = os.environ.get("HANG_BACKEND", "gloo")
    device = torch.device("cpu")
    if backend == "nccl":
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]) % torch.cuda.device_count())
        torch.cuda.set_device(device)
    timeout = os.environ.get("HANG_PG_TIMEOUT_S")
    kwargs = {"timeout": datetime.timedelta(seconds=float(timeout))} if timeout else {}
    dist.init_process_group(backend, **kwargs)
    rank = dist.get_rank()
    ready = Path(os.environ["READY_DIR"]) / f"rank-{rank}"
    t = torch.ones(1, device=device)
    dist.all_reduce(t)
    if device.type == "cuda":
        torch.cuda.synchronize()
    if rank == int(os.environ.get("HANG_RANK", "3")):
        load_batch(ready)
    ready.touch()
    dist.all_reduce(t)
    if device.type == "cuda":
        torch.cuda.synchronize()  # NCCL is asynchronous: wait here, where the stack shows it


if __name__ == "__main__":
    main()
