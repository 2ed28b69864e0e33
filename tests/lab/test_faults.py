"""Ring 3: the lab's two networks and its fault commands (scripts/cluster.sh fault).

As on a site, a node's hostname is its management Ethernet (Slurm's NodeAddr: slurmctld, srun
and sbcast go over it; slow) and the fabric has names of its own (JUWELS' `jwbKKKKi`):
  - both networks reach node to node: the hostname from the node's management address, the
    `i` name from its fabric address (the source address of the connection says which);
  - `fault NODE fabric-down` leaves the node alive: its `i` address is silent from a peer (a
    timeout, never a refusal), its hostname answers, `srun -w NODE hostname` runs (Slurm over
    the management network), its slurmd is the same process; `status` lists the fault; a second
    fabric-down is refused; `fabric-up` brings the fabric back;
  - `fault NODE flap S` blanks the fabric for S s and returns with it up, letting the lab's
    lock go meanwhile (`status` answers during the flap);
  - `fault controller-stop S`: a Slurm command issued meanwhile is answered only once slurmctld
    runs again;
  - bad input is refused in one line.
kill-node's silence on both networks is in test_node_loss.py. Lane b (tests/helpers/lanes.py):
a node without its fabric and a stopped controller must not meet lane a's jobs.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Dict, Iterator, List

import pytest

from tests.helpers import lanes

REPO = Path(__file__).resolve().parents[2]
CLUSTER = ["bash", str(REPO / "scripts/cluster.sh")]
STATE = Path("/run/torchrun-jsc-cluster")

# Run in a node (its namespaces, its /etc/hosts): connect to each name's slurmd port; per name
# [outcome, the local address the connection used (or the errno), seconds].
PROBE = r"""
import json, socket, sys, time
timeout, out = float(sys.argv[1]), {}
for name in sys.argv[2:]:
    t0 = time.monotonic()
    try:
        c = socket.create_connection((name, 6818), timeout=timeout)
        out[name] = ["reachable", c.getsockname()[0], round(time.monotonic() - t0, 2)]
        c.close()
    except OSError as e:
        out[name] = [type(e).__name__, e.errno, round(time.monotonic() - t0, 2)]
print(json.dumps(out))
"""


def sh(argv: List[str], timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)


def probe(node: str, *names: str, timeout: float = 3.0) -> Dict[str, list]:
    pid = (STATE / f"slurmd-{node}.pid").read_text().strip()
    p = sh(["nsenter", "-t", pid, "-n", "-u", "-m", "python3", "-c", PROBE, str(timeout), *names])
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def state(node: str) -> str:
    """sinfo's short state of ``node`` (``resv``: idle in lane b's reservation)."""
    return (sh(["sinfo", "-h", "-N", "-n", node, "-o", "%t"]).stdout.split() or ["?"])[0]


def k(node: str) -> int:
    return int(node[3:])


@pytest.fixture
def pair(cluster) -> Iterator[List[str]]:
    """[victim, peer]: the lane's last and first node, the victim idle."""
    nodes = lanes.all_nodes()
    victim, peer = nodes[-1], nodes[0]
    deadline = time.monotonic() + 60  # the lane's previous job may still be completing there
    while state(victim) not in lanes.IDLE and time.monotonic() < deadline:
        time.sleep(0.5)
    assert state(victim) in lanes.IDLE, f"{victim} must be idle for this test: {nodes}"
    yield [victim, peer]
    sh([*CLUSTER, "fault", victim, "fabric-up"])  # whatever the test left


def test_both_networks_reach_node_to_node(pair):
    victim, peer = pair
    r = probe(peer, victim, victim + "i")
    # the hostname: the management network (from the peer's eth0 address), the i name: fabric
    assert r[victim][:2] == ["reachable", f"10.67.0.{k(peer)}"], r
    assert r[victim + "i"][:2] == ["reachable", f"10.66.0.{k(peer)}"], r
    # Slurm reaches the node at its management address (NodeAddr), as on a site
    fields = sh(["scontrol", "show", "node", "-o", victim]).stdout
    assert f" NodeAddr=10.67.0.{k(victim)} " in fields, fields


def test_fabric_down_leaves_the_node_and_slurm_working(pair):
    victim, peer = pair
    slurmd = (STATE / f"slurmd-{victim}.pid").read_text().strip()
    p = sh([*CLUSTER, "fault", victim, "fabric-down"])
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"fabric of {victim} down at " in p.stdout, p.stdout
    status = sh([*CLUSTER, "status"])
    assert status.returncode == 0 and f"fault: {victim} fabric-down since " in status.stdout, \
        status.stdout + status.stderr
    r = probe(peer, victim, victim + "i", timeout=3)
    print(r)
    assert r[victim][0] == "reachable", r  # management: alive
    assert r[victim + "i"][0] in ("TimeoutError", "timeout"), r  # fabric: silence, no RST
    t0 = time.monotonic()
    run = sh(["srun", "-w", victim, "-N1", "-n1", "--time=1", "hostname"], timeout=60)
    print(f"srun -w {victim} hostname with its fabric down: {time.monotonic() - t0:.1f} s")
    assert run.returncode == 0 and run.stdout.strip() == victim, run.stdout + run.stderr
    assert (STATE / f"slurmd-{victim}.pid").read_text().strip() == slurmd
    assert Path(f"/proc/{slurmd}/comm").read_text().strip() == "slurmd"
    again = sh([*CLUSTER, "fault", victim, "fabric-down"])
    assert again.returncode == 1 and again.stderr.count("\n") == 1 and \
        f"fabric of {victim} is already down" in again.stderr, again.stderr
    up = sh([*CLUSTER, "fault", victim, "fabric-up"])
    assert up.returncode == 0 and f"fabric of {victim} up at " in up.stdout, up.stdout + up.stderr
    assert probe(peer, victim + "i")[victim + "i"][0] == "reachable"
    assert "fault:" not in sh([*CLUSTER, "status"]).stdout


def test_flap_blanks_the_fabric_for_its_seconds(pair):
    victim, peer = pair
    t0 = time.monotonic()
    flap = subprocess.Popen([*CLUSTER, "fault", victim, "flap", "5"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(1)
        during = probe(peer, victim + "i", timeout=1.5)
        status = sh([*CLUSTER, "status"], timeout=30)  # the flap lets the lock go meanwhile
        out, err = flap.communicate(timeout=60)
    finally:
        if flap.poll() is None:
            flap.kill()
    took = time.monotonic() - t0
    print(f"flap 5: returned after {took:.1f} s; during it: {during}")
    assert flap.returncode == 0, out + err
    assert during[victim + "i"][0] in ("TimeoutError", "timeout"), during
    assert f"fault: {victim} flap since " in status.stdout, status.stdout + status.stderr
    assert 5 <= took < 15, took
    assert f"fabric of {victim} up at " in out, out
    assert probe(peer, victim + "i")[victim + "i"][0] == "reachable"


def test_controller_stop_holds_slurm_commands(cluster):
    stop = subprocess.Popen([*CLUSTER, "fault", "controller-stop", "3"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(1)
        t0 = time.monotonic()
        info = sh(["sinfo", "-h", "-o", "%D"], timeout=30)
        waited = time.monotonic() - t0
        out, err = stop.communicate(timeout=60)
    finally:
        if stop.poll() is None:
            stop.kill()
    print(f"sinfo during a 3 s controller stop answered after {waited:.1f} s")
    assert stop.returncode == 0, out + err
    assert "slurmctld stopped at " in out and "slurmctld continued at " in out, out
    assert info.returncode == 0, info.stderr  # answered once it ran again (MessageTimeout 10 s)
    assert waited >= 1.0, waited
    assert "fault:" not in sh([*CLUSTER, "status"]).stdout


@pytest.mark.parametrize("args, says", [
    ([], "usage: "),  # the lab's default sites (JWB_CLUSTER_SITES) hold lrdn0001 (below)
    (["jwb9999", "fabric-down"], "no node 'jwb9999'"),
    (["jwb0001", "unplug"], "unknown fault 'unplug'"),
    (["jwb0001", "flap", "0"], "SECONDS must be a number in (0, 3600], got '0'"),
    (["jwb0001", "flap"], "usage: "),
    (["jwb0001,,jwb0002", "fabric-down"], "NODE list must be names joined by commas"),
    (["controller-stop", "soon"], "SECONDS must be a number in (0, 3600], got 'soon'"),
    (["lrdn0001", "fabric-down"], "lrdn0001 has one network"),
])
def test_bad_faults_are_refused_in_one_line(cluster, args, says):
    p = sh([*CLUSTER, "fault", *args])
    assert p.returncode == 1 and p.stderr.count("\n") == 1 and says in p.stderr, p.stderr
    assert "fault:" not in sh([*CLUSTER, "status"]).stdout
