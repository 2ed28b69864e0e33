"""Ring 3: a node that dies as hardware dies (scripts/cluster.sh kill-node / revive-node).

kill-node takes the node's links off both bridges first (fabric and management network: a
dead node is silent on both), then SIGKILLs every process of its namespace at once: a peer that
connects, by the fabric name or by the hostname, gets silence (a timeout, or no route once its
ARP entry expires), never a refusal (RST) from a live kernel; Slurm is not told. revive-node
brings links and slurmd back and the node runs a step again.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from tests.helpers import lanes

REPO = Path(__file__).resolve().parents[2]
CLUSTER = ["bash", str(REPO / "scripts/cluster.sh")]
STATE = Path("/run/torchrun-jsc-cluster")

# From a live node: connect to the dead node's slurmd port on its fabric name.
PROBE = r"""
import socket, sys, time
t0 = time.monotonic()
try:
    socket.create_connection((sys.argv[1], 6818), timeout=4).close()
    print("PROBE connected")
except OSError as e:
    print("PROBE %s %s %.1f" % (type(e).__name__, e.errno, time.monotonic() - t0))
"""


def sh(argv: list[str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)


def alive(pid: str) -> bool:
    """Runs (a zombie that init has not reaped yet is dead)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def state(node: str) -> str:
    """sinfo's short state of ``node`` (``resv``: idle in lane b's reservation)."""
    return sh(["sinfo", "-h", "-N", "-n", node, "-o", "%t"]).stdout.split()[0]


def test_kill_node_is_silent_death_and_revive_node_brings_it_back(cluster):
    nodes = lanes.all_nodes()  # partition batch's, or lane b's (tests/helpers/lanes.py)
    victim, peer = nodes[-1], nodes[0]
    deadline = time.monotonic() + 60  # the lane's previous job may still be completing there
    while state(victim) not in lanes.IDLE and time.monotonic() < deadline:
        time.sleep(0.5)
    assert state(victim) in lanes.IDLE, f"{victim} must be idle for this test: {nodes}"
    slurmd = (STATE / f"slurmd-{victim}.pid").read_text().strip()
    p = sh([*CLUSTER, "kill-node", victim])
    assert p.returncode == 0, p.stderr
    try:
        assert f"killed {victim} at " in p.stdout and "links down" in p.stdout, p.stdout
        assert sh(["ip", "netns", "pids", victim]).stdout.strip() == ""
        assert not alive(slurmd)
        for end in ("p", "m"):  # the fabric's and the management network's link
            link = sh(["ip", "-o", "link", "show", f"{victim}{end}"]).stdout
            assert "state DOWN" in link, link
        # Slurm was told nothing: right after the kill it still counts the node as idle.
        assert state(victim) in lanes.IDLE, state(victim)
        again = sh([*CLUSTER, "kill-node", victim])
        assert again.returncode == 1 and f"node {victim} is already killed" in again.stderr
        for name in (f"{victim}i", victim):  # the fabric, then the management network
            probe = sh(["srun", "-w", peer, "-N1", "-n1", "--time=1", "python3", "-c", PROBE,
                        name], timeout=60)
            print(name, probe.stdout.strip())
            words = probe.stdout.split()
            assert words[:1] == ["PROBE"] and words[1] != "connected", probe.stdout + probe.stderr
            # silence, never ConnectionRefusedError (an RST from a kernel that still runs)
            assert words[1] in ("timeout", "TimeoutError", "OSError"), probe.stdout
    finally:
        revived = sh([*CLUSTER, "revive-node", victim])
    assert revived.returncode == 0, revived.stdout + revived.stderr
    assert f"revived {victim} at " in revived.stdout, revived.stdout
    run = sh(["srun", "-w", victim, "-N1", "-n1", "--time=1", "hostname"], timeout=60)
    assert run.stdout.strip() == victim, run.stdout + run.stderr
    bad = sh([*CLUSTER, "kill-node", "jwb9999"])
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1 and "no node 'jwb9999'" in bad.stderr
