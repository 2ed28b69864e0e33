"""Bench program: N short training-like steps (a matmul and an all_reduce each), timed.

On CUDA (one visible GPU or LOCAL_RANK's) with NCCL, else on the CPU with gloo; rank 0 prints
`STEPS n=N s=SECONDS per_step_us=MICROSECONDS cpus=ALLOWED` for the timed steps after --warmup untimed ones.
scripts/gpu-check.py times it with and without the kit's stack hook and progress thread: on a
GPU, steps of a few hundred microseconds show any per-step cost the hook might have.
"""

import argparse
import os
import time

import torch
import torch.distributed as dist


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--size", type=int, default=0, help="matrix side (default: 2048 GPU, 128 CPU)")
    a = ap.parse_args()
    cuda = torch.cuda.is_available()
    device = torch.device("cpu")
    if cuda:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))
                              % torch.cuda.device_count())
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if cuda else "gloo")
    side = a.size or (2048 if cuda else 128)
    x = torch.randn(side, side, device=device)
    t = torch.zeros(1, device=device)

    def step() -> None:
        y = x @ x
        t.copy_(y[0, :1])
        dist.all_reduce(t)

    for _ in range(a.warmup):
        step()
    if cuda:
        torch.cuda.synchronize()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(a.steps):
        step()
    if cuda:
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    if dist.get_rank() == 0:
        print(f"STEPS n={a.steps} s={elapsed:.4f} per_step_us={elapsed / a.steps * 1e6:.1f} "
              f"cpus={len(os.sched_getaffinity(0))}", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
