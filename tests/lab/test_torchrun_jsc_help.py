"""Ring 3 (needs torch): torchrun_jsc's parser is torch's, renamed, with its own epilog."""

import subprocess
import sys
from pathlib import Path

import pytest

from launcher.task.torchrun_jsc import usage

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("argv", [
    ["--rdzv-backend=c10d", "--rdzv-endpoint=jwb0001i:29500", "--nnodes=2", "t.py", "--lr", "1"],
    ["--standalone", "--nproc_per_node=2", "--no-python", "hostname", "--help"],
    ["--nnodes=2", "t.py", "--version"],  # the script's own --version, not torchrun_jsc's
])
def test_same_namespace_as_torchs_parser(argv):
    # Imported here, not at the top: `-m "not ring3"` in a venv without torch still collects.
    from torch.distributed import run as torch_run

    assert vars(usage.parser(torch_run).parse_args(argv)) == vars(torch_run.parse_args(argv))


def test_help_names_torchrun_jsc_and_lists_torchs_options_and_our_variables():
    p = subprocess.run([sys.executable, "-m", "launcher.task.torchrun_jsc", "--help"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120, check=False)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("usage: torchrun_jsc [-h] ")
    assert "--rdzv-endpoint" in p.stdout and "--local-addr" in p.stdout
    for name, _ in usage.ENV_VARS:
        assert name in p.stdout
    assert "examples:" in p.stdout and "torch is not importable" not in p.stdout
