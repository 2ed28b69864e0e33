"""Ring 2: the Horovod NCCL build on a -runtime docker base is refused in one line before
anything is built (InfiniBand userspace in every image, containers/files/verbs_check.py)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_horovod_nccl_on_runtime_base_is_refused_in_one_line():
    env = dict(os.environ, DOCKER_FROM="pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime")
    p = subprocess.run(["bash", "scripts/build-image.sh", "horovod", "docker", "/nonexistent/h.sif"],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert "needs a -devel base" in lines[0]
    assert "DOCKER_FROM=pytorch/pytorch:2.7.1-cuda12.8-cudnn9-devel" in lines[0]
    assert not Path("/nonexistent/h.sif").exists()
