"""examples/allreduce_bw.py with a broken all_reduce on one rank: after the real all_reduce,
rank WRONG_RANK adds 1 to the first element of every float32 result (a corrupting transport).
The program must refuse to report a bandwidth (tests/fakes/test_allreduce_bw.py)."""

import importlib.util
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

PATH = Path(__file__).resolve().parents[3] / "examples" / "allreduce_bw.py"


def main() -> int:
    spec = importlib.util.spec_from_file_location("allreduce_bw", PATH)
    program = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(program)
    real = dist.all_reduce

    def corrupting(tensor, *args, **kwargs):
        out = real(tensor, *args, **kwargs)
        if dist.get_rank() == int(os.environ["WRONG_RANK"]) and tensor.dtype == torch.float32:
            tensor[0] += 1
        return out

    dist.all_reduce = corrupting
    return program.main()


if __name__ == "__main__":
    sys.exit(main())
