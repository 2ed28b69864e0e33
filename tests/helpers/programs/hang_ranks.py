"""Test program: 4 gloo ranks; rank 3 gets stuck in its own function, the others wait for it
in all_reduce. Each rank touches READY_DIR/rank-R once it is where it stays."""

import os
import time
from pathlib import Path

import torch
import torch.distributed as dist


def load_batch(ready: Path) -> None:
    ready.touch()
    time.sleep(600)  # stuck: the odd one out


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    ready = Path(os.environ["READY_DIR"]) / f"rank-{rank}"
    t = torch.ones(1)
    dist.all_reduce(t)
    if rank == 3:
        load_batch(ready)
    ready.touch()
    dist.all_reduce(t)


if __name__ == "__main__":
    main()
