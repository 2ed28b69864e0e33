"""Ring 2: examples/allreduce_bw.py for real: gloo ranks as separate processes on loopback
(RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR=127.0.0.1, MASTER_PORT, as a launcher sets them),
small sizes. Rank 0 prints one ALLREDUCE_BW line per size with nccl-tests' bandwidths; a
floor above the measured bus bandwidth ends every rank with exit 3 and one line; a corrupted
all_reduce (tests/helpers/programs/allreduce_wrong.py) ends every rank with exit 1 and one
line, and no bandwidth. The pure parts: tests/unit/test_allreduce_bw.py."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import List, Sequence

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = ROOT / "examples" / "allreduce_bw.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ranks(world: int, args: Sequence[str], program: Path = PROGRAM,
          **extra: str) -> List[subprocess.CompletedProcess]:
    """``world`` processes of ``program``, as a launcher starts them on one node."""
    port = str(free_port())
    procs = []
    for rank in range(world):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=port, OMP_NUM_THREADS="1",
                   PYTHONPATH=str(ROOT), **extra)
        for name in ("CUDA_VISIBLE_DEVICES", "SLURM_GPUS_ON_NODE", "SLURM_JOB_GPUS",
                     "SLURM_STEP_GPUS"):
            env.pop(name, None)  # the CPU, as on this machine
        procs.append(subprocess.Popen([sys.executable, str(program), *args], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))
    done = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=120)
            done.append(subprocess.CompletedProcess(p.args, p.returncode, out, err))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return done


def records(stdout: str) -> List[dict]:
    lines = stdout.splitlines()
    assert all(ln.startswith("ALLREDUCE_BW {") for ln in lines), stdout
    return [json.loads(ln.split(" ", 1)[1]) for ln in lines]


def test_two_gloo_ranks_print_one_line_per_size():
    r0, r1 = ranks(2, ["--sizes", "64K,4K", "--warmup", "2", "--iters", "5"])
    assert (r0.returncode, r1.returncode) == (0, 0), r0.stderr + r1.stderr
    assert (r1.stdout, r0.stderr, r1.stderr) == ("", "", "")  # rank 0 speaks, only it
    got = records(r0.stdout)
    assert [r["bytes"] for r in got] == [4096, 65536]  # ascending
    for r in got:
        assert list(r)[:8] == ["bytes", "world_size", "backend", "device", "time_s",
                               "algbw_gbps", "busbw_gbps", "hosts"]
        assert (r["world_size"], r["backend"], r["device"], r["dtype"], r["iters"]) == \
            (2, "gloo", "cpu", "float32", 5)
        assert r["hosts"] == [socket.gethostname()]
        assert r["time_s"] > 0
        assert r["algbw_gbps"] == pytest.approx(r["bytes"] / r["time_s"] / 1e9, rel=1e-3)
        assert r["busbw_gbps"] == r["algbw_gbps"]  # 2(n-1)/n = 1 for two ranks


def test_floor_above_the_bus_bandwidth_exits_3_on_every_rank():
    """Three ranks: the sum 1+2+3 checked, and busbw = algbw * 4/3."""
    done = ranks(3, ["--sizes", "4K,16K", "--warmup", "1", "--iters", "3", "--floor", "1e6"])
    assert [p.returncode for p in done] == [3, 3, 3], [p.stderr for p in done]
    got = records(done[0].stdout)
    assert [(r["bytes"], r["world_size"]) for r in got] == [(4096, 3), (16384, 3)]
    for r in got:
        assert r["busbw_gbps"] == pytest.approx(r["algbw_gbps"] * 4 / 3, rel=1e-3)
    assert done[0].stderr == (
        f"allreduce_bw.py: all_reduce of 16384 bytes over 3 ranks (gloo, hosts "
        f"{socket.gethostname()}): bus bandwidth {got[-1]['busbw_gbps']:.3g} GB/s is below "
        "the floor of 1e+06 GB/s\n")
    assert all((p.stdout, p.stderr) == ("", "") for p in done[1:])


def test_a_wrong_sum_reports_no_bandwidth():
    done = ranks(2, ["--sizes", "4K", "--iters", "2"],
                 program=ROOT / "tests/helpers/programs/allreduce_wrong.py", WRONG_RANK="1")
    assert [p.returncode for p in done] == [1, 1], [p.stderr for p in done]
    assert done[0].stdout == "" and (done[1].stdout, done[1].stderr) == ("", "")
    assert done[0].stderr == (
        "allreduce_bw.py: all_reduce of 4096 bytes over 2 ranks (gloo) is WRONG on ranks [1]: "
        "rank 1 has 1 of 1024 elements wrong (first: 4.0, expected 3); no bandwidth reported\n")


def test_nccl_without_cuda_and_a_floor_for_one_rank_are_refused():
    (nccl,) = ranks(1, ["--backend", "nccl"])
    assert (nccl.returncode, nccl.stdout, nccl.stderr) == (2, "", (
        "allreduce_bw.py: --backend nccl needs a CUDA device; this process has none "
        "(accepted on CPU: gloo)\n"))
    (alone,) = ranks(1, ["--floor", "5", "--sizes", "4K"])
    assert (alone.returncode, alone.stdout, alone.stderr) == (2, "", (
        "allreduce_bw.py: --floor needs at least 2 ranks (world size 1: an all_reduce of one "
        "rank moves no bytes)\n"))
