"""Ring 3: the seed tutorial programs under `torchrun_jsc --standalone` (real torch, gloo)."""

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.ring3

ROOT = Path(__file__).resolve().parent.parent
TORCHRUN_JSC = [sys.executable, "-m", "launcher.torchrun_jsc"]


def run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([*TORCHRUN_JSC, *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("nproc", [1, 3])
def test_collectives_standalone(nproc):
    p = run("--standalone", f"--nproc_per_node={nproc}", "tests/programs/collectives_check.py")
    assert p.returncode == 0, p.stderr[-3000:]
    want = f"sum={nproc * (nproc + 1) // 2} gather={list(range(nproc))}"
    assert p.stdout.count("COLLECTIVES_OK") == nproc and want in p.stdout
    for r in range(nproc):
        assert f"rank={r} local_rank={r} world_size={nproc}" in p.stdout
    assert "torchrun_jsc: running torchrun unchanged (--standalone)" in p.stderr


def test_non_python_executable():
    p = run("--standalone", "--nproc_per_node=2", "--no_python", "hostname")
    assert p.returncode == 0, p.stderr[-3000:]
    import socket
    assert p.stdout.split() == [socket.gethostname()] * 2


def test_failing_worker_propagates():
    p = run("--standalone", "--nproc_per_node=2", "--no_python", "false")
    assert p.returncode != 0
