"""Three lanes, two of them on one lab (issue 42): `make test` runs the ring-3 tests that
spend their time waiting (deadlines, heartbeat timeouts, requeue holds, killed nodes) in a
second pytest process, lane b, beside the lab's other tests (lane a), each lane on nodes of its
own; and everything that needs no lab (rings 1 and 2, LANE_C's ring-3 files, torch-compat's
oldest torch) in a third, lane c, so that lane a starts on the lab at once.

- Lane b's tests are LANE_B below (a file, or one test of a file), marked ``lane_b`` by
  tests/conftest.py: lane a runs ``-m "not lane_b"``, lane b ``-m lane_b`` with
  $TORCHRUN_JSC_LAB_LANE=b. Without that variable (a plain ``pytest tests``) every test runs
  in one process, lane b's on the first nodes of partition batch, as before.
- Lane b runs first what changes the whole lab (``cluster.sh down``/``up``, a resize), then
  grows the lab by LANE_NODES nodes and reserves those for itself (a Slurm reservation,
  $SBATCH_RESERVATION/$SLURM_RESERVATION in its environment), and only then says the lab is
  ready ($TORCHRUN_JSC_LAB_READY, a file). Lane a's first lab test waits for that file (rings
  1 and 2 run meanwhile), and its jobs never land on the reserved nodes: Slurm keeps them for
  the reservation's jobs. No test sees the other lane's jobs, nodes or kills.
- Lane c (``-m "lane_c or not ring3"``, $TORCHRUN_JSC_LAB_LANE=c) never touches the lab: a
  test of it that asks for the ``cluster`` fixture fails. LANE_C's files build network
  namespaces of their own (tests/helpers/jscnet.py, docn1/2) or none.
- Image builds go through tests/helpers/bin/make (one build at a time: both lab lanes build
  image.sif)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import List

import pytest

from tests.helpers.labjobs import job_fields
from tests.helpers.labsize import batch_nodes, sh

REPO = Path(__file__).resolve().parents[2]
LANE_ENV = "TORCHRUN_JSC_LAB_LANE"
READY_ENV = "TORCHRUN_JSC_LAB_READY"
RESERVATION = "lane_b"
LANE_NODES = 3  # the spare-node tests' 2 training nodes + 1 spare
READY_WAIT_S = 1800  # lane b's lab tests before its reservation: down/up and resize, ~2 min

# In this order in lane b: first what changes the whole lab (before the reservation exists),
# then the tests that wait.
LANE_B = (
    "tests/lab/test_cluster.py::test_down_and_up_are_idempotent_and_leave_nothing",
    "tests/lab/test_cluster_resize.py",
    # takes partition batch down while its killed nodes are away: before lane a starts
    "tests/lab/test_spare_nodes.py::test_no_spare_left_falls_back_to_requeue",
    "tests/lab/test_hangs.py",
    "tests/lab/test_hung_node.py",
    "tests/lab/test_node_loss.py",
    "tests/lab/test_faults.py",
    "tests/lab/test_requeue.py",
    "tests/lab/test_spare_nodes.py",
)
# The lab-wide ones: they run before lane b reserves its nodes (they take the lab down, resize
# it, or take partition batch down: the spare-node requeue test keeps the second attempt off its
# killed nodes until they are back).
LAB_WIDE = LANE_B[:3]
# Ring-3 files that need root or torch but no Slurm lab: lane c, with rings 1 and 2.
LANE_C = (
    "tests/lab/test_doctor_netns.py",
    "tests/lab/test_storage_stall.py",
    "tests/lab/test_torchrun_jsc_args.py",
    "tests/lab/test_torchrun_jsc_help.py",
    "tests/lab/test_torchrun_jsc_real.py",
    "tests/lab/test_torchrun_jsc_standalone.py",
    "tests/lab/test_torchrun_jsc_store_limits.py",
)


def lane() -> str:
    """'a', 'b' or 'c' in that lane's process, '' when the tests run in one process."""
    return os.environ.get(LANE_ENV, "")


def _names(nodeid: str, entry: str) -> bool:
    """LANE_B's ``entry`` (a file, or one test of a file) names the test ``nodeid``."""
    return nodeid == entry or nodeid.startswith(entry + "::")


def in_lane_b(nodeid: str) -> bool:
    return any(_names(nodeid, t) for t in LANE_B)


def in_lane_c(nodeid: str) -> bool:
    return any(_names(nodeid, t) for t in LANE_C)


def lab_wide(nodeid: str) -> bool:
    return any(_names(nodeid, t) for t in LAB_WIDE)


def order(nodeid: str) -> int:
    """Lane b's order: LANE_B's (the lab-wide tests first)."""
    return next((i for i, t in enumerate(LANE_B) if _names(nodeid, t)), len(LANE_B))


def reserved_nodes() -> List[str]:
    """The nodes of lane b's reservation ([] when there is none)."""
    p = sh(["scontrol", "show", "reservation", RESERVATION, "-o"])
    fields = dict(t.split("=", 1) for t in p.stdout.split() if "=" in t)
    if p.returncode != 0 or "Nodes" not in fields:
        return []
    names = sh(["scontrol", "show", "hostnames", fields["Nodes"]]).stdout.split()
    return sorted(names)


def reserve() -> List[str]:
    """Lane b: the lab grown by LANE_NODES nodes in place, those reserved for this process's
    jobs (root's and the lab user's), the reservation named in this process's environment
    (sbatch, srun and salloc read it). Returns the lane's nodes."""
    nodes = reserved_nodes()
    if not nodes:
        found = len(batch_nodes())
        p = sh(["bash", str(REPO / "scripts/cluster.sh"), "up", str(found + LANE_NODES)],
               timeout=600)
        assert p.returncode == 0, p.stdout + p.stderr
        nodes = batch_nodes()[found:found + LANE_NODES]
        p = sh(["scontrol", "create", "reservation", f"ReservationName={RESERVATION}",
                "StartTime=now", "Duration=UNLIMITED", "Users=root,jwbuser",
                "Flags=IGNORE_JOBS", f"Nodes={','.join(nodes)}"])
        assert p.returncode == 0, p.stdout + p.stderr
        nodes = reserved_nodes()
        assert len(nodes) == LANE_NODES, nodes
    for var in ("SBATCH_RESERVATION", "SLURM_RESERVATION", "SALLOC_RESERVATION"):
        os.environ[var] = RESERVATION
    return nodes


def say_ready() -> None:
    """Lane b: the lab is lane a's to use (written once lane b's nodes are reserved, or when
    lane b ends, whatever happened)."""
    path = os.environ.get(READY_ENV)
    if path and not os.path.exists(path):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(f"lane b ready at {time.time():.3f}\n")


def wait_ready() -> None:
    """Lane a: until lane b has reserved its nodes (or ended). Lane c: fail, it has no lab."""
    if lane() == "c":
        pytest.fail("a lane-c test asked for the lab (the cluster fixture): lane c runs "
                    "only what needs no Slurm lab; move the file out of LANE_C "
                    "(tests/helpers/lanes.py)")
    path = os.environ.get(READY_ENV)
    if lane() != "a" or not path:
        return
    deadline = time.monotonic() + READY_WAIT_S
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            pytest.fail(f"lane b did not reserve its nodes in {READY_WAIT_S} s (no {path}): "
                        "see its log, build/test-results/lane-b.log")
        time.sleep(1)


def nodes(count: int) -> List[str]:
    """The first ``count`` nodes this process's lab jobs run on: lane b's reservation in lane
    b, else partition batch's (growing the lab is the caller's: tests.helpers.labsize)."""
    have = reserved_nodes() if lane() == "b" else batch_nodes()
    assert len(have) >= count, f"{count} nodes needed, the lane has {have}"
    return have[:count]


def job_nodes(job_id: str) -> List[str]:
    """The nodes Slurm gave job ``job_id``, in order (lane b's jobs run on its reservation's
    nodes: a test reads them from the job, never assumes jwb0001)."""
    fields = job_fields(job_id)
    assert fields.get("NodeList", "(null)") != "(null)", fields
    return hostnames(fields["NodeList"])


def hostnames(nodelist: str) -> List[str]:
    """Slurm's NODELIST (``jwb[0003-0004]``) as names."""
    return sh(["scontrol", "show", "hostnames", nodelist]).stdout.split()


def all_nodes() -> List[str]:
    """Every node this process's jobs may run on: lane b's reservation, else partition batch."""
    return reserved_nodes() if lane() == "b" else batch_nodes()


# sinfo's short state of an idle node: ``resv`` while it is in lane b's reservation
IDLE = ("idle", "resv")
