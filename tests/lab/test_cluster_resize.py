"""Ring 3: `scripts/cluster.sh up N` resizes a running lab in place (issue 36), the cheap smoke
of the scale lab that CI runs (the lab at 64 nodes is `make test-scale`, tests/lab/test_scale.py).

From the size it finds (2 in CI) to two more nodes and back: no `down`, the accounting and the
job ids kept, every node's private /etc/hosts rewritten so that old and new nodes reach each
other by their `i` names over the fabric and by their hostnames over the management network, `up` without N keeping the bigger lab (a
test run must not shrink a lab someone grew), every node with the others as permanent
neighbours (no ARP between them), a shrink refused in one line while a job runs on a node it
would remove, and the removed nodes' namespaces, links and neighbour entries gone.
"""

from __future__ import annotations

import json
import os
import time

from tests.helpers import labsize
from tests.helpers.labsize import CLUSTER, STATE, node, sh


def daemon_pids() -> dict:
    return {name: (STATE / f"{name}.pid").read_text().strip()
            for name in ("mariadbd", "slurmdbd") if (STATE / f"{name}.pid").exists()}


def permanent_neighbours(name: str) -> list:
    out = sh(["ip", "-n", name, "neigh", "show", "nud", "permanent"]).stdout
    return sorted(line.split()[0] for line in out.splitlines())


def neighbours(ks, me: int) -> list:
    """Node ``me``'s permanent neighbours in a lab of nodes ``ks``: every other node and the
    controller (.254) on the fabric (10.66) and on the management network (10.67)."""
    return sorted(f"10.6{net}.0.{j}" for net in (6, 7) for j in [*ks, 254] if j != me)


def job(*args: str) -> str:
    p = sh(["sbatch", "--parsable", "--time=2", "-o", "/dev/null", *args], timeout=60)
    assert p.returncode == 0, p.stderr
    return p.stdout.strip()


def wait_running(job_id: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if sh(["squeue", "-h", "-j", job_id, "-o", "%T"]).stdout.strip() == "RUNNING":
            return
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} not running after {timeout:.0f} s")


def test_up_n_grows_and_shrinks_a_running_lab_in_place(cluster):
    found = labsize.size()
    assert found >= 2
    bigger = found + 2
    daemons = daemon_pids()
    first = job("--wait", "-N1", "--wrap", "true")

    p, grow_s = labsize.up(bigger)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"up: {bigger} nodes" in p.stdout and f"(resized from {found})" in p.stdout, p.stdout
    print(f"resize {found} -> {bigger} nodes: {grow_s:.1f} s")
    try:
        names = [node(k) for k in range(1, bigger + 1)]
        assert labsize.batch_nodes() == names
        assert sh(["sinfo", "-h", "-p", "urgent", "-o", "%D"]).stdout.strip() == str(bigger)
        # the same accounting database and controller state: the job before is still there,
        # the next id follows it
        assert daemon_pids() == daemons
        acct = sh(["sacct", "-n", "-X", "-j", first, "-o", "State"]).stdout.split()
        assert acct == ["COMPLETED"], acct
        assert int(job("--wait", "-N1", "--wrap", "true")) > int(first)

        # `up` without N (what tests/conftest.py runs) keeps the bigger lab, restarts nothing
        pids = labsize.slurmd_pids()
        same = sh([*CLUSTER, "up"])
        assert same.returncode == 0 and f"up: {bigger} nodes" in same.stdout, same.stdout
        assert labsize.slurmd_pids() == pids

        # every node, old and new: its own names, the next node by `i` (the fabric) and by
        # hostname (the management network)
        r = sh(["srun", f"-N{bigger}", "--ntasks-per-node=1", "--time=1", "python3", "-c",
                labsize.PROBE, *names], timeout=120)
        assert r.returncode == 0, r.stderr
        probes = {x["me"]: x for x in (json.loads(line.split(" ", 1)[1])
                                       for line in r.stdout.splitlines()
                                       if line.startswith("PROBE "))}
        assert sorted(probes) == names, r.stdout
        for k, name in enumerate(names, 1):
            x = probes[name]
            assert x["me_addrs"][-1] == f"10.67.0.{k}" and x["me_i_addrs"] == [f"10.66.0.{k}"], x
            assert x[x["peer"] + "i"] == "reachable" and x[x["peer"]] == "reachable", x
            assert x["src"] == {x["peer"] + "i": f"10.66.0.{k}", x["peer"]: f"10.67.0.{k}"}, x

        # no ARP between the nodes (64 nodes' requests at once overflowed the one kernel's
        # backlog): every node has the others and the controller as permanent neighbours, on
        # both networks
        for k, name in enumerate(names, 1):
            assert permanent_neighbours(name) == neighbours(range(1, bigger + 1), k)

        # a shrink that would remove a busy node is refused, naming the job
        busy = job("-w", node(bigger), "--wrap", "sleep 120")
        wait_running(busy)
        refused = sh([*CLUSTER, "up", str(found)])
        assert refused.returncode == 1 and refused.stderr.count("\n") == 1, refused.stderr
        assert f"job(s) {busy} run on nodes beyond {node(found)}" in refused.stderr
        assert labsize.batch_nodes() == names
        sh(["scancel", busy])
        cluster.wait_gone(busy, 60)
    finally:
        p, shrink_s = labsize.up(found)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"(resized from {bigger})" in p.stdout, p.stdout
    print(f"resize {bigger} -> {found} nodes: {shrink_s:.1f} s")
    assert labsize.batch_nodes() == [node(k) for k in range(1, found + 1)]
    netns = sh(["ip", "netns", "list"]).stdout
    links = sh(["ip", "-o", "link"]).stdout
    for k in range(found + 1, bigger + 1):
        assert node(k) not in netns and f"{node(k)}p" not in links
        assert not (STATE / f"hosts-{node(k)}").exists()
    # the remaining nodes' /etc/hosts (seen from inside a node) no longer names them
    hosts = sh(["srun", "-w", node(1), "-N1", "--time=1", "cat", "/etc/hosts"], timeout=60)
    assert hosts.returncode == 0 and f"{node(found)}i" in hosts.stdout, hosts.stderr
    assert node(bigger) not in hosts.stdout, hosts.stdout
    assert permanent_neighbours(node(1)) == neighbours(range(1, found + 1), 1)
    assert daemon_pids() == daemons


def test_bad_node_counts_are_refused_in_one_line(cluster):
    before = labsize.size()
    for bad in ("0", "129", "8x", "-3", "010"):
        p = sh([*CLUSTER, "up", bad])
        assert p.returncode == 1 and p.stderr == \
            f"cluster.sh: node count must be 1..128, got '{bad}'\n", p.stderr
    assert labsize.size() == before
    assert os.path.exists(STATE / "nodes")
