"""The ring of every test is its folder: tests/unit is ring 1 (pure), tests/fakes ring 2
(rendered scripts and local processes under recording fakes), tests/lab ring 3 (real Slurm,
Apptainer, Enroot, torch; root). tests/helpers holds what is not a test (the fakes, the lab's
network and faults, the lab tests' shared steps, programs the tests run).

Shared fixtures. `cluster`: the local Slurm cluster (scripts/cluster.sh up, idempotent), for
ring 3; `shared_tmp`: a directory the lab's nodes see."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Iterator, List

import pytest

from tests.helpers import lanes

REPO = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent
RINGS = {"unit": "ring1", "fakes": "ring2", "lab": "ring3"}


def ring_of(path: Path) -> str:
    """The ring marker of a test file, from the folder it sits in under tests/."""
    folder = path.resolve().relative_to(TESTS).parts[0]
    if folder not in RINGS:
        raise pytest.UsageError(f"{path}: a test file must sit in tests/unit, tests/fakes or "
                                f"tests/lab (its folder sets its ring), not in tests/{folder}")
    return RINGS[folder]


def pytest_collection_modifyitems(items: List[pytest.Item]) -> None:
    """Mark each test with its folder's ring, so that `-m ring1`, `-m "not ring3"` select by
    folder and no test file can be left without a ring; lane b's tests with ``lane_b``
    (tests/helpers/lanes.py), which in lane b's process run in that list's order, and lane
    c's lab-free ring-3 files with ``lane_c``."""
    for item in items:
        item.add_marker(ring_of(item.path))
        if lanes.in_lane_b(item.nodeid):
            item.add_marker("lane_b")
        if lanes.in_lane_c(item.nodeid):
            item.add_marker("lane_c")
    if lanes.lane() == "b":
        items.sort(key=lambda item: lanes.order(item.nodeid))  # stable: file order within


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Lane b ends: the lab is lane a's, whatever happened (its first lab test waits for this
    word or for lane b's reservation)."""
    if lanes.lane() == "b":
        lanes.say_ready()


@pytest.fixture(scope="session")
def lane_b_nodes(cluster) -> List[str]:
    """Lane b's nodes, reserved once the lab-wide tests are done (tests/helpers/lanes.py)."""
    nodes = lanes.reserve()
    lanes.say_ready()
    return nodes


@pytest.fixture(autouse=True)
def _lane(request: pytest.FixtureRequest) -> None:
    """In lane b's process, every test but the lab-wide ones runs on lane b's reservation."""
    if lanes.lane() == "b" and not lanes.lab_wide(request.node.nodeid):
        request.getfixturevalue("lane_b_nodes")


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

    Fails, never skips, when the prerequisites (root, `make setup`) are missing. In lane a's
    process, first waits until lane b has its nodes (tests/helpers/lanes.py)."""
    lanes.wait_ready()
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
