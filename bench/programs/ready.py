"""Bench program: time to the first all_reduce, gloo bandwidth, or a crash on cue.

Prints machine-readable lines (one per rank): `READY rank=R t=EPOCH` after
init_process_group and a first checked all_reduce; with --bw-mb, rank 0 prints
`BW gbps=X` for an all_reduce of a float32 tensor of that size; with --crash-rank,
that rank prints `CRASH t=EPOCH` and exits 3 after the first all_reduce while the others
compute for --work-s seconds (a training step between collectives) and then wait in a
barrier: the situation a jobscript must tear down. (Blocked in a gloo collective, a peer sees
the closed socket at once; computing, it notices only at its next collective; with NCCL it
can hang until the NCCL timeout.) With --work-steps N every rank runs N compute-bound steps
(single-threaded matmuls, an all_reduce each) and rank 0 prints `WORK s=SECONDS`: what CPU
placement costs.

With --phases (the scale bench) every rank also prints, before READY, when each phase of its
first step happened:

    PHASES rank=R host=H start=EPOCH imported=EPOCH pg=EPOCH ready=EPOCH cpu=SECONDS

start: the program's first line (the interpreter is up); imported: torch and
torch.distributed imported; pg: init_process_group("gloo") returned (rendezvous through the
store at MASTER_ADDR, or torchrun's); ready: the first all_reduce done. cpu: this process's
user + system CPU seconds until then.
"""

import time

START = time.time()

import argparse  # noqa: E402
import os  # noqa: E402
import resource  # noqa: E402
import socket  # noqa: E402
import sys  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

IMPORTED = time.time()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bw-mb", type=int, default=0)
    ap.add_argument("--bw-iters", type=int, default=10)
    ap.add_argument("--crash-rank", type=int, default=-1)
    ap.add_argument("--work-s", type=float, default=30.0)
    ap.add_argument("--work-steps", type=int, default=0)
    ap.add_argument("--phases", action="store_true")
    a = ap.parse_args()
    dist.init_process_group("gloo")
    pg = time.time()
    rank, world = dist.get_rank(), dist.get_world_size()
    t = torch.ones(1)
    dist.all_reduce(t)
    if t.item() != world:
        print(f"BAD all_reduce {t.item()} != {world}", flush=True)
        return 1
    ready = time.time()
    if a.phases:
        ru = resource.getrusage(resource.RUSAGE_SELF)
        print(f"PHASES rank={rank} host={socket.gethostname()} start={START:.6f} "
              f"imported={IMPORTED:.6f} pg={pg:.6f} ready={ready:.6f} "
              f"cpu={ru.ru_utime + ru.ru_stime:.3f}", flush=True)
    print(f"READY rank={rank} t={ready:.6f}", flush=True)
    if a.bw_mb:
        x = torch.ones(a.bw_mb * 1024 * 1024 // 4)
        dist.all_reduce(x)  # warm-up
        dist.barrier()
        start = time.perf_counter()
        for _ in range(a.bw_iters):
            dist.all_reduce(x)
        elapsed = time.perf_counter() - start
        if rank == 0:
            print(f"BW gbps={a.bw_mb * a.bw_iters * 8 / 1024 / elapsed:.4f}", flush=True)
    if a.work_steps:
        torch.set_num_threads(1)  # one core per worker, as a DataLoader-free training step
        m = torch.rand(384, 384)
        dist.barrier()
        start = time.perf_counter()
        for _ in range(a.work_steps):
            m = torch.tanh(m @ m)
            dist.all_reduce(m[:1, :1].clone())
        elapsed = time.perf_counter() - start
        if rank == 0:
            print(f"WORK s={elapsed:.4f}", flush=True)
    if a.crash_rank == rank:
        print(f"CRASH t={time.time():.6f}", flush=True)
        os._exit(3)
    if a.crash_rank >= 0:
        end = time.monotonic() + a.work_s
        m = torch.rand(256, 256)
        while time.monotonic() < end:
            m = torch.tanh(m @ m)
        dist.barrier()  # fails: the crashed rank never arrives
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
