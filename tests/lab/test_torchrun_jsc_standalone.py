"""Ring 3: the seed tutorial programs under `torchrun_jsc --standalone` (real torch, gloo)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TORCHRUN_JSC = [sys.executable, "-m", "launcher.task.torchrun_jsc"]


def run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([*TORCHRUN_JSC, *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("nproc", [1, 3])
def test_collectives_standalone(nproc):
    p = run("--standalone", f"--nproc_per_node={nproc}",
            "tests/helpers/programs/collectives_check.py")
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


def test_torch_older_than_1_9_is_refused_in_one_line(tmp_path):
    """A stand-in torch package reporting 1.8.1 (torchrun did not exist): one line, exit 2."""
    fake = tmp_path / "torch"
    fake.mkdir()
    (fake / "__init__.py").write_text("__version__ = '1.8.1'\n")
    p = subprocess.run([sys.executable, "-c", "import sys; from launcher.task.torchrun_jsc import main;"
                        " sys.exit(main(['--nnodes=2', 't.py']))"],
                       cwd=ROOT, capture_output=True, text=True, timeout=60,
                       env={"PYTHONPATH": f"{tmp_path}:{ROOT}", "PATH": "/usr/bin:/bin"})
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == [
        "torchrun_jsc: error: torch 1.8.1 is too old; torchrun_jsc needs torch >= 1.9 "
        "(the first with torchrun)"]


def test_error_file_names_the_failed_workers_exception(tmp_path):
    """As torchrun's main (wrapped in torch's record): TORCHELASTIC_ERROR_FILE gets the root
    cause of the first failed worker."""
    error_file = tmp_path / "error.json"
    p = subprocess.run([*TORCHRUN_JSC, "--standalone", "--nproc_per_node=2",
                        "tests/helpers/programs/failing_worker.py"], cwd=ROOT, capture_output=True,
                       text=True, timeout=120,
                       env=dict(os.environ, TORCHELASTIC_ERROR_FILE=str(error_file)))
    assert p.returncode != 0
    assert "ChildFailedError" in p.stderr and "failing_worker.py FAILED" in p.stderr, p.stderr
    text = error_file.read_text()
    assert "ValueError" in text and "tjsc worker failed on purpose" in text, text


def test_fault_handler_installed_like_torchrun():
    """A fatal signal in the agent dumps the Python stacks (torch's record enables
    faulthandler); the worker sends it to its parent, the agent."""
    p = run("--standalone", "--nproc_per_node=1", "--no_python", "sh", "-c",
            'kill -SEGV "$PPID"; sleep 2')
    assert p.returncode != 0
    assert "Fatal Python error: Segmentation fault" in p.stderr, p.stderr[-3000:]


@pytest.mark.parametrize("name,value,msg", [
    ("TORCHRUN_JSC_RESOLVE_TIMEOUT", "soon",
     "TORCHRUN_JSC_RESOLVE_TIMEOUT: expected a number of seconds > 0, got 'soon'"),
    ("TORCHRUN_JSC_ADDRESS_FAMILY", "inet",
     "TORCHRUN_JSC_ADDRESS_FAMILY: expected one of auto, ipv4, ipv6, any, got 'inet'"),
])
def test_bad_variable_is_one_line_exit_2(name, value, msg):
    p = subprocess.run([*TORCHRUN_JSC, "--nnodes=1", "--rdzv_backend=c10d",
                        "--rdzv_endpoint=localhost:29400", "t.py"], cwd=ROOT, capture_output=True,
                       text=True, timeout=60, env=dict(os.environ, **{name: value}))
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == [f"torchrun_jsc: error: {msg}"]
