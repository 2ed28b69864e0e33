"""The lab's size for the tests that resize it (tests/lab/test_cluster_resize.py, the scale
tests): what `scripts/cluster.sh up N` left, a context manager that brings the lab to N nodes
and back to the size it found, and a probe that every node of a step runs (no torch)."""

from __future__ import annotations

import subprocess
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Dict, Iterator, List, Tuple

REPO = Path(__file__).resolve().parents[2]
CLUSTER = ["bash", str(REPO / "scripts/cluster.sh")]
STATE = Path("/run/torchrun-jsc-cluster")

# Run on every node by srun: the node's own names, then a TCP connect to the next node's slurmd
# (in the ring of the step's nodes) by its hostname (the management network) and by its `i` name
# (the fabric), with the local address each connection left from ("src": which network carried
# it). argv: the step's node names in order.
PROBE = r"""
import json, socket, sys
me = socket.gethostname()
nodes = sys.argv[1:]
peer = nodes[(nodes.index(me) + 1) % len(nodes)]
addrs = lambda name: list(dict.fromkeys(a[4][0] for a in socket.getaddrinfo(name, None, socket.AF_INET)))
res = {"me": me, "me_addrs": addrs(me), "me_i_addrs": addrs(me + "i"), "peer": peer, "src": {}}
for name in (peer, peer + "i"):
    try:
        c = socket.create_connection((name, 6818), timeout=5)
        res["src"][name] = c.getsockname()[0]
        c.close()
        res[name] = "reachable"
    except OSError as e:
        res[name] = type(e).__name__
try:  # nothing leaves the machine: no default route in a node
    socket.create_connection(("192.0.2.1", 9), timeout=3).close()
    res["outside"] = "reachable"
except OSError as e:
    res["outside"] = e.errno
print("PROBE " + json.dumps(res), flush=True)
"""


def sh(argv: List[str], timeout: float = 120, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False, **kw)


def size() -> int:
    """The JUWELS Booster node count the running lab was brought up with (0: not up)."""
    path = STATE / "nodes"
    return int(path.read_text()) if path.exists() and path.read_text().strip() else 0


def batch_nodes() -> List[str]:
    """The nodes of partition batch as sinfo lists them."""
    out = sh(["sinfo", "-h", "-N", "-p", "batch", "-o", "%N"]).stdout.split()
    return sorted(set(out))


def up(n: int) -> Tuple[subprocess.CompletedProcess, float]:
    t0 = time.monotonic()
    p = sh([*CLUSTER, "up", str(n)], timeout=600)
    return p, time.monotonic() - t0


@contextmanager
def resized(n: int) -> Iterator[float]:
    """The lab at n nodes (seconds the resize took), back at the size found afterwards."""
    found = size() or 2
    p, took = up(n)
    try:
        assert p.returncode == 0, p.stdout + p.stderr
        yield took
    finally:
        back, _ = up(found)
        assert back.returncode == 0, back.stdout + back.stderr


@contextmanager
def at_least(n: int) -> Iterator[None]:
    """The lab with at least n nodes in batch: grown in place if it has fewer (a running lab
    keeps its jobs and accounting), shrunk back in place afterwards to the size it had, which
    the later tests assume."""
    found = len(batch_nodes())
    if found < n:
        p, _ = up(n)
        assert p.returncode == 0, p.stdout + p.stderr
    try:
        yield
    finally:
        if found < n:
            back, _ = up(found)
            assert back.returncode == 0, back.stdout + back.stderr


def slurmd_pids() -> Dict[str, str]:
    return {p.name: p.read_text().strip() for p in sorted(STATE.glob("slurmd-*.pid"))}


def node(k: int) -> str:
    return f"jwb{k:04d}"
