"""Shared fixtures. `cluster`: the local Slurm cluster (scripts/cluster.sh up, idempotent), for ring 3."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Iterator

import pytest

REPO = Path(__file__).resolve().parent.parent


def load_slurmjob() -> ModuleType:
    """scripts/cluster/slurmjob.py (submit, wait, check DDP_SUMMARY) as a module."""
    if "slurmjob" in sys.modules:
        return sys.modules["slurmjob"]
    spec = importlib.util.spec_from_file_location("slurmjob", REPO / "scripts/cluster/slurmjob.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["slurmjob"] = mod  # dataclasses look their module up while it executes
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="session")
def cluster() -> ModuleType:
    """Bring the cluster up (no-op when it is up) and return the job helper module.

    Fails, never skips, when the prerequisites (root, `make setup`) are missing."""
    p = subprocess.run(["bash", str(REPO / "scripts/cluster.sh"), "up"], capture_output=True,
                       text=True, timeout=180, check=False)
    if p.returncode != 0:
        pytest.fail(f"scripts/cluster.sh up failed (rc {p.returncode}):\n{p.stdout}{p.stderr}")
    return load_slurmjob()


@pytest.fixture
def shared_tmp(request: pytest.FixtureRequest) -> Iterator[Path]:
    """A fresh directory on the shared filesystem (under the checkout's build/) for files that
    jobs read or write. The lab's nodes, like real ones, each have their own /tmp, so pytest's
    tmp_path (under /tmp) is invisible to them. World-writable, for the lab's second user."""
    root = REPO / "build" / "lab-tmp"
    root.mkdir(parents=True, exist_ok=True)
    prefix = re.sub(r"\W+", "_", request.node.name)[:40] + "-"
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=root))
    path.chmod(0o1777)
    yield path
    shutil.rmtree(path, ignore_errors=True)
