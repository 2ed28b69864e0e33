"""all_reduce bus bandwidth: is the network as fast as the site says?

Run after any launcher that sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT
(torchrun/torchrun_jsc, srun with the composer's task script), e.g. 2 processes on one machine:

    torchrun_jsc --standalone --nproc_per_node=2 examples/allreduce_bw.py --sizes 1M,16M,256M

Backend nccl when the device is CUDA (the device by torchrun_jsc_kit.select_device's rule), else gloo;
``--backend`` forces one. For each size (bytes of float32, ascending; K/M/G are 2**10/2**20/
2**30 as in nccl-tests), ``--warmup`` untimed then ``--iters`` timed in-place all_reduces
(SUM; CUDA synchronised around the timed loop). ``time_s`` is the mean time of one
all_reduce on the slowest rank. Bandwidths are nccl-tests' (doc/PERFORMANCE.md), in GB/s
with GB = 1e9 bytes:

    algbw = bytes / time_s / 1e9
    busbw = algbw * 2 * (n - 1) / n     (n = world size; what each link carries in a ring,
                                          comparable across n and with the link's rate)

Rank 0 prints ONE line per size:

    ALLREDUCE_BW {"bytes": 1048576, "world_size": 2, "backend": "gloo", "device": "cpu",
                  "time_s": ..., "algbw_gbps": ..., "busbw_gbps": ..., "hosts": [...], ...}

The result is checked before and after the timed loop (every rank contributes rank + 1 in
every element; every element must be n(n+1)/2): a bandwidth of a wrong all_reduce is
worthless, so a wrong sum ends every rank with exit 1 and rank 0 prints one line saying
where. ``--floor GBPS``: exit 3 with one line when the largest size's busbw is below it
(on a GPU site the site's floor, e.g. ~80 % of the InfiniBand link rate). Bad arguments:
one line, exit 2, before torch is imported; with NCCL, two ranks on one GPU (NCCL refuses
them): one line, exit 2 (the checks' Python objects travel over a gloo group, so this is
said before NCCL is touched).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import socket
import sys
import time
from typing import Any, Dict, List, Mapping, NoReturn, Optional, Sequence

PREFIX = "ALLREDUCE_BW "
PROG = "allreduce_bw.py"
ITEM_BYTES = 4  # float32
UNITS = {"": 1, "K": 2 ** 10, "M": 2 ** 20, "G": 2 ** 30}
DEFAULT_SIZES = {"cuda": "1M,16M,256M,1G", "cpu": "64K,1M,8M"}  # gloo on CPU: seconds
EXIT_WRONG, EXIT_BAD_INPUT, EXIT_BELOW_FLOOR = 1, 2, 3


class BadInput(ValueError):
    """A value on the command line that cannot be used (the message is the one line)."""


def parse_size(text: str) -> int:
    """``4096``, ``64K``, ``16M``, ``1G`` (binary multiples, case-insensitive) -> bytes."""
    t = text.strip().upper()
    unit = t[-1] if t[-1:] in ("K", "M", "G") else ""
    digits = t[:len(t) - len(unit)]
    if not (digits.isascii() and digits.isdigit()):
        raise BadInput(f"--sizes: {text!r} is not a size (accepted: a number of bytes with an "
                       "optional K, M or G, e.g. 1M,16M,256M)")
    size = int(digits) * UNITS[unit]
    if size <= 0 or size % ITEM_BYTES:
        raise BadInput(f"--sizes: {text!r} is {size} bytes; a size must be a positive multiple "
                       f"of {ITEM_BYTES} bytes (float32 elements)")
    return size


def parse_sizes(text: str) -> List[int]:
    """A comma-separated list of sizes -> distinct byte counts, ascending."""
    parts = text.split(",")
    if not text.strip() or any(not p.strip() for p in parts):
        raise BadInput(f"--sizes: {text!r} has an empty entry (accepted: sizes separated by "
                       "commas, e.g. 1M,16M,256M)")
    return sorted({parse_size(p) for p in parts})


def parse_floor(text: str) -> float:
    """``--floor``: a positive, finite bus bandwidth in GB/s."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (math.isfinite(value) and value > 0):
        raise BadInput(f"--floor: {text!r} is not a bandwidth (accepted: a positive number of "
                       "GB/s, e.g. 20)")
    return value


def bandwidths(size: int, time_s: float, world: int) -> Dict[str, float]:
    """nccl-tests' algorithm and bus bandwidth of one all_reduce, GB/s (1e9 bytes/s)."""
    algbw = size / time_s / 1e9
    return {"algbw_gbps": algbw, "busbw_gbps": algbw * 2 * (world - 1) / world}


def verdict(results: Sequence[Mapping[str, Any]], floor: Optional[float]) -> Optional[str]:
    """One line when the largest size's busbw is below ``floor``; None when it is not (or no
    floor was given)."""
    if floor is None or not results:
        return None
    top = max(results, key=lambda r: r["bytes"])
    if top["busbw_gbps"] >= floor:
        return None
    hosts = ",".join(top.get("hosts", [])) or "?"
    return (f"{PROG}: all_reduce of {top['bytes']} bytes over {top['world_size']} ranks "
            f"({top['backend']}, hosts {hosts}): bus bandwidth {top['busbw_gbps']:.3g} GB/s is "
            f"below the floor of {floor:g} GB/s")


def wrong_sum(size: int, world: int, backend: str,
              bad: Sequence[Sequence[Any]]) -> Optional[str]:
    """One line naming the ranks whose result was wrong, from each rank's
    ``(rank, wrong elements, first wrong value)``; None when every element was right."""
    wrong = [b for b in bad if b[1]]
    if not wrong:
        return None
    expected = world * (world + 1) // 2
    rank, count, value = wrong[0]
    return (f"{PROG}: all_reduce of {size} bytes over {world} ranks ({backend}) is WRONG on "
            f"ranks {[b[0] for b in wrong]}: rank {rank} has {count} of {size // ITEM_BYTES} "
            f"elements wrong (first: {value}, expected {expected}); no bandwidth reported")


def shared_gpu(placements: Sequence[Sequence[Any]]) -> Optional[str]:
    """One line when two ranks use the same GPU (NCCL refuses that), from each rank's
    ``(rank, host, GPU id or None)``; None when every rank has a GPU of its own."""
    seen: Dict[Any, int] = {}
    for rank, host, gpu in placements:
        if gpu is None:
            continue
        if (host, gpu) in seen:
            return (f"{PROG}: ranks {seen[(host, gpu)]} and {rank} share one GPU on {host}: "
                    "NCCL needs a GPU per rank (start one process per GPU, e.g. "
                    "--nproc_per_node=1 on a node with one GPU, or use --backend gloo)")
        seen[(host, gpu)] = rank
    return None


def gpu_id(torch: Any, device: Any) -> Optional[str]:
    """Which physical GPU ``device`` is (its UUID where torch tells it), or None on CPU."""
    if device.type != "cuda":
        return None
    uuid = getattr(torch.cuda.get_device_properties(device), "uuid", None)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    return str(uuid) if uuid is not None else f"{visible}#{device.index}"


def line(record: Mapping[str, Any]) -> str:
    return PREFIX + json.dumps(dict(record))


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, not usage + error
        raise BadInput(f"{message} (see --help)")


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = _Parser(prog=PROG, description=__doc__.split("\n")[0],
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default=None,
                   help=f"bytes per all_reduce, comma-separated, K/M/G = 2**10/2**20/2**30 "
                        f"(default: {DEFAULT_SIZES['cuda']} on CUDA, {DEFAULT_SIZES['cpu']} "
                        "on CPU)")
    p.add_argument("--warmup", type=int, default=5, help="untimed all_reduces per size")
    p.add_argument("--iters", type=int, default=20, help="timed all_reduces per size")
    p.add_argument("--backend", choices=("nccl", "gloo"), default=None,
                   help="default: nccl on CUDA, gloo on CPU")
    p.add_argument("--floor", default=None, metavar="GBPS",
                   help="exit 3 when the largest size's bus bandwidth is below GBPS GB/s")
    p.add_argument("--timeout", type=float, default=300.0, help="collective timeout, seconds")
    p.add_argument("--local_rank", "--local-rank", type=int, default=None,
                   help="accepted (deepspeed passes it); unused")
    args = p.parse_args(list(argv))
    if args.sizes is not None:
        args.sizes = parse_sizes(args.sizes)
    if args.floor is not None:
        args.floor = parse_floor(args.floor)
    if args.warmup < 0 or args.iters < 1:
        raise BadInput(f"--warmup {args.warmup} --iters {args.iters}: need warmup >= 0 and "
                       "iters >= 1")
    if args.timeout <= 0:
        raise BadInput(f"--timeout: {args.timeout} is not a positive number of seconds")
    return args


def _fill_and_check(dist: Any, meta: Any, buf: Any, rank: int, world: int) -> List[Any]:
    """All_reduce rank + 1 in every element; every rank's (rank, wrong count, first wrong)."""
    buf.fill_(rank + 1)
    dist.all_reduce(buf)
    wrong = buf != world * (world + 1) // 2
    count = int(wrong.sum().item())
    first = float(buf[wrong.nonzero()[0]].item()) if count else None
    bad: List[Any] = [None] * world
    dist.all_gather_object(bad, (rank, count, first), group=meta)
    return bad


def measure(torch: Any, dist: Any, meta: Any, device: Any, size: int, warmup: int,
            iters: int) -> Any:
    """Seconds per all_reduce of ``size`` bytes (the slowest rank's), or the wrong-sum line.
    ``meta``: the gloo group that carries the checks' Python objects."""
    rank, world = dist.get_rank(), dist.get_world_size()
    backend = dist.get_backend()
    cuda = device.type == "cuda"
    buf = torch.empty(size // ITEM_BYTES, dtype=torch.float32, device=device)
    why = wrong_sum(size, world, backend, _fill_and_check(dist, meta, buf, rank, world))
    if why:
        return why
    buf.zero_()  # the timed loop sums in place: zeros stay finite however many iterations
    for _ in range(warmup):
        dist.all_reduce(buf)
    sync = torch.zeros(1, device=device)
    dist.all_reduce(sync)  # every rank here before anyone starts the clock
    if cuda:
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(buf)
    if cuda:
        torch.cuda.synchronize(device)
    elapsed = torch.tensor([(time.perf_counter() - start) / iters], dtype=torch.float64,
                           device=device)
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)  # the slowest rank's time
    why = wrong_sum(size, world, backend, _fill_and_check(dist, meta, buf, rank, world))
    return why or float(elapsed.item())


def is_rank0(env: Mapping[str, str]) -> bool:
    return env.get("RANK", "0") in ("", "0")


def main(argv: Optional[Sequence[str]] = None) -> int:
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv)
    except BadInput as err:
        if is_rank0(os.environ):  # every rank has the same arguments: one line, not n
            print(f"{PROG}: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT

    import torch
    import torch.distributed as dist

    try:  # every rank of a kit job has it (the kit's hook folder), as has an install of the kit
        from torchrun_jsc_kit import select_device
    except ImportError:  # run by hand from a clone: the clone's, beside this example
        sys.path.append(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                     "launcher", "task", "hook"))
        from torchrun_jsc_kit import select_device

    device = select_device(torch)  # GPUs requested but unusable: one line, never the CPU
    kind = "cuda" if device.type == "cuda" else "cpu"
    backend = args.backend or ("nccl" if kind == "cuda" else "gloo")
    if backend == "nccl" and kind != "cuda":
        if is_rank0(os.environ):
            print(f"{PROG}: --backend nccl needs a CUDA device; this process has none "
                  "(accepted on CPU: gloo)", file=sys.stderr)
        return EXIT_BAD_INPUT
    if kind == "cuda":
        torch.cuda.set_device(device)
    sizes = args.sizes or parse_sizes(DEFAULT_SIZES[kind])
    dist.init_process_group(backend, init_method="env://",
                            timeout=datetime.timedelta(seconds=args.timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    if args.floor is not None and world < 2:
        if rank == 0:
            print(f"{PROG}: --floor needs at least 2 ranks (world size {world}: an all_reduce "
                  "of one rank moves no bytes)", file=sys.stderr)
        dist.destroy_process_group()
        return EXIT_BAD_INPUT
    # Python objects (hosts, the checks) go over gloo: NCCL would fail before it could say
    # why (two ranks on one GPU) and stages every object through the GPU.
    meta = None if backend == "gloo" else dist.new_group(backend="gloo")
    placements: List[Any] = [None] * world
    dist.all_gather_object(placements, (rank, socket.gethostname(), gpu_id(torch, device)),
                           group=meta)
    hosts = sorted({host for _, host, _ in placements})
    why = shared_gpu(placements) if backend == "nccl" else None
    if why:
        if rank == 0:
            print(why, file=sys.stderr, flush=True)
        dist.destroy_process_group()
        return EXIT_BAD_INPUT
    results = []
    for size in sizes:
        got = measure(torch, dist, meta, device, size, args.warmup, args.iters)
        if isinstance(got, str):
            if rank == 0:
                print(got, file=sys.stderr, flush=True)
            dist.destroy_process_group()
            return EXIT_WRONG
        record = {"bytes": size, "world_size": world, "backend": backend,
                  "device": str(device), "time_s": float(f"{got:.6g}"),
                  **{k: float(f"{v:.4g}") for k, v in bandwidths(size, got, world).items()},
                  "hosts": hosts, "dtype": "float32", "iters": args.iters}
        results.append(record)
        if rank == 0:
            print(line(record), flush=True)
    dist.destroy_process_group()
    why = verdict(results, args.floor)
    if why:
        if rank == 0:
            print(why, file=sys.stderr, flush=True)
        return EXIT_BELOW_FLOOR
    return 0


if __name__ == "__main__":
    sys.exit(main())
