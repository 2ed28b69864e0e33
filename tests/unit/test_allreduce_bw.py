"""Ring 1: examples/allreduce_bw.py without torch: sizes, floor and arguments read (one line,
exit 2, before torch is imported), nccl-tests' bandwidth formulas, the floor's verdict and
the wrong-sum line. The real gloo ranks: tests/fakes/test_allreduce_bw.py."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PATH = ROOT / "examples" / "allreduce_bw.py"


def load():
    spec = importlib.util.spec_from_file_location("allreduce_bw", PATH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


bw = load()


@pytest.mark.parametrize("text, size", [
    ("4096", 4096), ("4K", 4096), ("64k", 65536), ("1M", 2 ** 20), ("16M", 16 * 2 ** 20),
    ("1G", 2 ** 30), (" 256M ", 256 * 2 ** 20),
])
def test_sizes_are_bytes_with_binary_multiples(text, size):
    assert bw.parse_size(text) == size


def test_size_list_is_distinct_and_ascending():
    assert bw.parse_sizes("16M,1M,256M,1M") == [2 ** 20, 16 * 2 ** 20, 256 * 2 ** 20]
    assert bw.parse_sizes(bw.DEFAULT_SIZES["cpu"]) == [65536, 2 ** 20, 8 * 2 ** 20]
    assert bw.parse_sizes(bw.DEFAULT_SIZES["cuda"])[-1] == 2 ** 30


@pytest.mark.parametrize("text, why", [
    ("1.5M", "'1.5M' is not a size"), ("-1M", "'-1M' is not a size"),
    ("M", "'M' is not a size"), ("1T", "'1T' is not a size"), ("²", "'²' is not a size"),
    ("0", "'0' is 0 bytes; a size must be a positive multiple of 4"),
    ("6", "'6' is 6 bytes; a size must be a positive multiple of 4"),
    ("1M,,4M", "'1M,,4M' has an empty entry"), ("", "'' has an empty entry"),
])
def test_bad_sizes_say_what_and_what_is_accepted(text, why):
    with pytest.raises(bw.BadInput) as err:
        bw.parse_sizes(text)
    msg = str(err.value)
    assert msg.startswith(f"--sizes: {why}"), msg
    assert msg.endswith(("e.g. 1M,16M,256M)", "(float32 elements)")), msg  # what is accepted


@pytest.mark.parametrize("text", ["0", "-3", "nan", "inf", "fast", ""])
def test_bad_floor(text):
    with pytest.raises(bw.BadInput, match=r"^--floor: .* is not a bandwidth \(accepted: a "):
        bw.parse_floor(text)
    assert bw.parse_floor("20") == 20.0 and bw.parse_floor("0.5") == 0.5


def test_bandwidths_are_nccl_tests_definitions():
    """algbw = bytes / time; busbw = algbw * 2(n-1)/n; GB = 1e9 bytes."""
    assert bw.bandwidths(10 ** 9, 0.1, 2) == {"algbw_gbps": 10.0, "busbw_gbps": 10.0}
    got = bw.bandwidths(10 ** 9, 0.1, 8)
    assert got["algbw_gbps"] == 10.0 and got["busbw_gbps"] == pytest.approx(17.5)
    assert bw.bandwidths(2 ** 30, 1.0, 4)["busbw_gbps"] == pytest.approx(2 ** 30 / 1e9 * 1.5)
    assert bw.bandwidths(4096, 1e-3, 1)["busbw_gbps"] == 0.0  # one rank moves nothing


def rec(size, busbw, world=2):
    return {"bytes": size, "world_size": world, "backend": "nccl", "busbw_gbps": busbw,
            "hosts": ["jwb0001", "jwb0002"]}


def test_verdict_judges_the_largest_size_only():
    results = [rec(2 ** 28, 18.0), rec(2 ** 20, 2.0)]  # small sizes are latency-bound
    assert bw.verdict(results, None) is None
    assert bw.verdict(results, 18.0) is None  # at the floor passes
    assert bw.verdict(results, 10.0) is None
    assert bw.verdict(results, 20.0) == (
        "allreduce_bw.py: all_reduce of 268435456 bytes over 2 ranks (nccl, hosts "
        "jwb0001,jwb0002): bus bandwidth 18 GB/s is below the floor of 20 GB/s")
    assert bw.verdict([], 20.0) is None


def test_wrong_sum_names_the_ranks():
    assert bw.wrong_sum(4096, 2, "gloo", [(0, 0, None), (1, 0, None)]) is None
    assert bw.wrong_sum(4096, 3, "gloo", [(0, 0, None), (1, 2, 7.0), (2, 1, 5.0)]) == (
        "allreduce_bw.py: all_reduce of 4096 bytes over 3 ranks (gloo) is WRONG on ranks "
        "[1, 2]: rank 1 has 2 of 1024 elements wrong (first: 7.0, expected 6); no bandwidth "
        "reported")


def test_two_ranks_on_one_gpu_are_named():
    """NCCL refuses a communicator with two ranks on one GPU: say so, in one line."""
    own = [(0, "jwb0001", "GPU-a"), (1, "jwb0001", "GPU-b"), (2, "jwb0002", "GPU-a")]
    assert bw.shared_gpu(own) is None  # the same GPU id on another host is another GPU
    assert bw.shared_gpu([(0, "vm", None), (1, "vm", None)]) is None  # CPU ranks
    assert bw.shared_gpu(own + [(3, "jwb0002", "GPU-a")]) == (
        "allreduce_bw.py: ranks 2 and 3 share one GPU on jwb0002: NCCL needs a GPU per rank "
        "(start one process per GPU, e.g. --nproc_per_node=1 on a node with one GPU, or use "
        "--backend gloo)")


def test_record_line_is_one_json_line():
    text = bw.line({"bytes": 4096, "hosts": ["a"]})
    assert text == 'ALLREDUCE_BW {"bytes": 4096, "hosts": ["a"]}' and "\n" not in text


def run(args, rank="0"):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, str(PATH), *args], capture_output=True, text=True,
                          timeout=60, env=dict(env, RANK=rank), check=False)


@pytest.mark.parametrize("args, msg", [
    (["--sizes", "1M,3"], "--sizes: '3' is 3 bytes"),
    (["--floor", "x"], "--floor: 'x' is not a bandwidth"),
    (["--iters", "0"], "--warmup 5 --iters 0: need warmup >= 0 and iters >= 1"),
    (["--backend", "mpi"], "argument --backend: invalid choice: 'mpi'"),
    (["--bogus"], "unrecognized arguments: --bogus (see --help)"),
])
def test_bad_arguments_one_line_exit_2_before_torch(args, msg):
    """No PYTHONPATH: neither torch nor the kit is needed to refuse bad arguments."""
    p = run(args)
    assert (p.returncode, p.stdout) == (2, "")
    assert p.stderr.startswith(f"allreduce_bw.py: {msg}") and p.stderr.count("\n") == 1, p.stderr
    other = run(args, rank="1")  # the other ranks have the same arguments: silent, exit 2
    assert (other.returncode, other.stdout, other.stderr) == (2, "", "")


def test_importing_runs_nothing_and_needs_no_torch():
    code = (f"import importlib.util, sys; s = importlib.util.spec_from_file_location('m', "
            f"{str(PATH)!r}); m = importlib.util.module_from_spec(s); s.loader.exec_module(m); "
            "print(sorted(n for n in ('torch', 'launcher') if n in sys.modules))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       check=True)
    assert p.stdout == "[]\n"
