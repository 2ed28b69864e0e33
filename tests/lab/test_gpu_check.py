"""Ring 3 (root: network namespaces; torch): scripts/gpu-check.py, the GPU machine's checks
(docs/development/gpu-check.md), run here so that it keeps working between GPU runs. Without a
GPU its network and hang checks run with gloo on the CPU and the GPU-only ones say SKIP."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def gpus() -> int:
    code = "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)"
    return int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=300, check=True).stdout)


def test_gpu_check_script_passes_here(tmp_path):
    done = subprocess.run([sys.executable, "scripts/gpu-check.py", str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=900)
    checks = dict(re.findall(r"^CHECK (\S+) (PASS|FAIL|SKIP):", done.stdout, re.M))
    if gpus():
        want = {"cuda-probe": "PASS", "device-rule": "PASS", "numa-binding": "PASS",
                "nccl-jsc": "PASS", "bandwidth": "PASS", "hang-nccl": "PASS",
                "hook-cost": "PASS"}
    else:
        want = {"cuda-probe": "SKIP", "device-rule": "SKIP", "numa-binding": "SKIP",
                "gloo-jsc": "PASS", "bandwidth": "PASS", "hang-gloo": "PASS",
                "hook-cost": "SKIP"}
    assert (done.returncode, checks) == (0, want), done.stdout + done.stderr[-3000:]
    hang = next(line for line in done.stdout.splitlines() if line.startswith("CHECK hang-"))
    assert "rank 1 on tjsc0002 in load_batch" in hang, hang
