"""Ring 3: the local Slurm cluster itself (scripts/cluster.sh).

>= 2 nodes with fake GPU GRES; a JSC-like network with two networks, as on the site (a node's
hostname is its management address, reachable from the other nodes over the slow management
network; hostname + "i" is the fabric); as strict as a real site (tasks bound to cores, a /tmp per
node, an ordinary second user, Debian-style /etc/hosts); up/down idempotent and leaving nothing
behind; refusal when not root. The jobs that run on it are in test_e2e_*.py.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers import labsize

REPO = Path(__file__).resolve().parents[2]
CLUSTER = ["bash", str(REPO / "scripts/cluster.sh")]
STATE = Path("/run/torchrun-jsc-cluster")
LOCK = Path("/run/torchrun-jsc-cluster.lock")


def sh(argv: list[str], timeout: float = 120, **kw) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False, **kw)


def slurmd_pids() -> dict[str, str]:
    return {p.name: p.read_text().strip() for p in sorted(STATE.glob("slurmd-jwb*.pid"))}


def test_cluster_has_two_nodes_up_with_fake_gpus(cluster):
    p = sh(["sinfo", "-h", "-N", "-p", "batch", "-o", "%N %P %T %G"])
    assert p.returncode == 0, p.stderr
    rows = [line.split() for line in p.stdout.splitlines()]
    assert len(rows) >= 2, p.stdout
    for node, partition, state, gres in rows:
        assert node.startswith("jwb") and partition == "batch*", p.stdout
        # busy is fine; reserved: lane b's nodes while `make test` runs (tests/helpers/lanes.py)
        assert state in ("idle", "mixed", "allocated", "completing", "reserved"), p.stdout
        assert gres.startswith("gpu:4"), p.stdout
    urgent = sh(["sinfo", "-h", "-p", "urgent", "-o", "%P %D"])  # the preempting partition
    assert urgent.stdout.split() == ["urgent", str(len(rows))], urgent.stdout


def test_gpu_options_are_accepted_and_set_cuda_visible_devices(cluster):
    p = sh(["srun", "-N2", "--ntasks-per-node=1", "--gpus-per-node=2", "--time=1",
            "bash", "-c", 'echo "$(hostname) $CUDA_VISIBLE_DEVICES"'], timeout=60)
    assert p.returncode == 0, p.stderr
    assert sorted(p.stdout.split("\n")[:2]) == ["jwb0001 0,1", "jwb0002 0,1"]


def test_network_is_jsc_like(cluster):
    """Every node's hostname is its management address, the "i" name its fabric address; each
    reaches the other node over its own network (the connection's source address says which),
    and Slurm's NodeAddr is the management address."""
    p = sh(["srun", "-N2", "--ntasks-per-node=1", "--time=1", "python3", "-c", labsize.PROBE,
            "jwb0001", "jwb0002"], timeout=60)
    assert p.returncode == 0, p.stderr
    probes = {r["me"]: r for r in (json.loads(line.split(" ", 1)[1])
                                   for line in p.stdout.splitlines() if line.startswith("PROBE "))}
    assert set(probes) == {"jwb0001", "jwb0002"}, p.stdout
    for k, me in ((1, "jwb0001"), (2, "jwb0002")):
        r = probes[me]
        peer = "jwb0002" if me == "jwb0001" else "jwb0001"
        # Debian-style /etc/hosts: the own name is 127.0.1.1 first, then its management
        # address; the "i" name only the fabric address.
        assert r["me_addrs"] == ["127.0.1.1", f"10.67.0.{k}"], r
        assert r["me_i_addrs"] == [f"10.66.0.{k}"], r
        # the fabric by the "i" name, the management network by the hostname (it works, as on
        # a site: a program that uses the hostname sends over the slow network)
        assert r[peer + "i"] == "reachable" and r["src"][peer + "i"] == f"10.66.0.{k}", r
        assert r[peer] == "reachable" and r["src"][peer] == f"10.67.0.{k}", r
        assert r["outside"] == errno.ENETUNREACH, r
    for k, node in ((1, "jwb0001"), (2, "jwb0002")):
        fields = sh(["scontrol", "show", "node", "-o", node]).stdout
        assert f" NodeAddr=10.67.0.{k} " in fields, fields  # slurmctld, srun: management


CPUS = 'echo "$(hostname) $(grep Cpus_allowed_list /proc/self/status | cut -f2)"'


@pytest.mark.parametrize("alloc, expected", [
    ([], "0"),  # one task, no CPU request: Slurm gives one core and binds the task to it
    (["--exclusive"], f"0-{os.cpu_count() - 1}"),  # whole nodes: every core
])
def test_tasks_are_bound_to_the_cores_they_got(cluster, alloc, expected):
    p = sh(["salloc", "-N2", "--ntasks-per-node=1", "--time=1", *alloc, "srun", "bash", "-c",
            CPUS], timeout=60)
    assert p.returncode == 0, p.stderr
    assert sorted(p.stdout.splitlines()) == [f"jwb0001 {expected}", f"jwb0002 {expected}"]


def test_every_node_has_its_own_tmp(cluster):
    mark = f"node-local-{os.getpid()}"
    p = sh(["srun", "-N2", "--ntasks-per-node=1", "--time=1", "bash", "-c",
            f'touch "/tmp/{mark}-$(hostname)"; sleep 1; echo "$(hostname):" /tmp/{mark}*'],
           timeout=60)
    assert p.returncode == 0, p.stderr
    # Each node sees only its own file (the sleep only keeps both tasks alive together).
    assert sorted(p.stdout.split()) == sorted(["jwb0001:", f"/tmp/{mark}-jwb0001",
                                               "jwb0002:", f"/tmp/{mark}-jwb0002"]), p.stdout
    assert not list(Path("/tmp").glob(f"{mark}*"))  # nor does the login node (the host)


def test_an_ordinary_user_submits_jobs(cluster, shared_tmp):
    out = shared_tmp / "user-%j.out"
    p = sh(["runuser", "-u", "jwbuser", "--", "sbatch", "--parsable", "--wait", "-N2",
            "--time=1", "-o", str(out), "--wrap",
            'srun --ntasks-per-node=1 bash -c \'echo "$(hostname) $(id -un) $HOME"\''],
           timeout=120, cwd=str(shared_tmp))
    assert p.returncode == 0, p.stdout + p.stderr
    log = shared_tmp / f"user-{p.stdout.strip()}.out"
    assert sorted(log.read_text().splitlines()) == ["jwb0001 jwbuser /home/jwbuser",
                                                    "jwb0002 jwbuser /home/jwbuser"]
    assert log.owner() == "jwbuser"


def test_host_etc_hosts_is_untouched(cluster):
    assert "jwb" not in Path("/etc/hosts").read_text()


def test_refuses_when_not_root():
    # The script comes on stdin so that `nobody` needs no read access to the checkout.
    with open(REPO / "scripts/cluster.sh") as script:
        p = subprocess.run(["runuser", "-u", "nobody", "--", "bash", "-s", "up"], stdin=script,
                           capture_output=True, text=True, timeout=30, check=False)
    assert p.returncode == 1
    assert p.stderr.count("\n") == 1 and "must run as root" in p.stderr, p.stderr


def lock_holders() -> list[str]:
    """Processes with scripts/cluster.sh's lock file open (a daemon that inherited it blocks
    every later `up`/`down` until it exits)."""
    held = []
    for fd in Path("/proc").glob("[0-9]*/fd/*"):
        try:
            if os.readlink(fd) == str(LOCK):
                held.append(f"{fd.parts[2]} {Path(f'/proc/{fd.parts[2]}/comm').read_text().strip()}")
        except OSError:  # the process or fd went away while we looked
            continue
    return held


def test_down_and_up_are_idempotent_and_leave_nothing(cluster):
    assert lock_holders() == [], "a daemon holds the cluster lock: the next `up` would wait 300 s"
    before = slurmd_pids()
    t0 = time.monotonic()
    p = sh([*CLUSTER, "up"])
    assert p.returncode == 0, p.stderr
    assert slurmd_pids() == before, "a second `up` must not restart the daemons"
    assert time.monotonic() - t0 < 10

    for _ in range(2):  # down twice: the second finds nothing to do
        p = sh([*CLUSTER, "down"])
        assert p.returncode == 0, p.stderr
        # every site's nodes (jwb*, jpbo-*, nid*, lrdn*) and every host-side link (jwb*)
        assert not [n for n in sh(["ip", "netns", "list"]).stdout.split()
                    if n.startswith(("jwb", "jpbo-", "nid", "lrdn"))]
        assert not [line for line in sh(["ip", "-o", "link"]).stdout.splitlines()
                    if line.split(": ")[1].startswith("jwb")]
        assert not list(STATE.glob("slurm*.pid"))
        assert not any(Path(f"/proc/{pid}").exists() for pid in before.values())
        assert sh(["pgrep", "-x", "slurmctld"]).returncode != 0
    t0 = time.monotonic()
    p = sh([*CLUSTER, "up"])
    up_s = time.monotonic() - t0
    assert p.returncode == 0, p.stderr
    print(f"cluster up from nothing: {up_s:.1f} s")
    status = sh([*CLUSTER, "status"])
    assert status.returncode == 0 and "idle" in status.stdout, status.stdout
    assert lock_holders() == []
    munged = (STATE / "munged.pid").read_text().strip() if (STATE / "munged.pid").exists() else None
    if munged is not None:  # recorded only when `up` started it: then it is the live daemon
        assert Path(f"/proc/{munged}/comm").read_text().strip() == "munged"


HELLO_MPI = r"""
#include <mpi.h>
#include <stdio.h>
#include <unistd.h>
int main(int argc, char **argv) {
    int rank, size, sum = 0; char host[64];
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank); MPI_Comm_size(MPI_COMM_WORLD, &size);
    gethostname(host, sizeof host);
    MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    printf("MPI %d/%d %s %d\n", rank, size, host, sum);
    MPI_Finalize();
    return 0;
}
"""


def test_srun_mpi_pmix_across_nodes(cluster, shared_tmp):
    """srun --mpi=pmix with Open MPI over the inter-node names (per-node PMIx tmpdir)."""
    (shared_tmp / "hello.c").write_text(HELLO_MPI)
    p = sh(["mpicc", "-o", str(shared_tmp / "hello"), str(shared_tmp / "hello.c")])
    assert p.returncode == 0, p.stderr
    # Open MPI's TCP transport must be told to use the inter-node network: the hostname's
    # address (eth0 here, as on JSC) is the slow management network.
    env = {**os.environ, "OMPI_MCA_btl_tcp_if_include": "10.66.0.0/16"}
    p = sh(["srun", "-N2", "--ntasks-per-node=2", "--mpi=pmix", "--time=1",
            str(shared_tmp / "hello")], timeout=60, env=env)
    assert p.returncode == 0, p.stderr
    lines = sorted(line for line in p.stdout.splitlines() if line.startswith("MPI "))
    assert lines == ["MPI 0/4 jwb0001 6", "MPI 1/4 jwb0001 6", "MPI 2/4 jwb0002 6",
                     "MPI 3/4 jwb0002 6"], p.stdout


def test_every_step_task_carries_mpi_rank_variables(cluster, shared_tmp):
    """As on real sites with MpiDefault=pmix (issue 26): each task of a step gets PMIX_RANK
    without asking for --mpi; the batch script gets none."""
    show = "echo TASK $SLURM_PROCID pmix=${PMIX_RANK:-none}"
    p = sh(["srun", "-N2", "--ntasks-per-node=2", "--time=1", "bash", "-c", show], timeout=60)
    assert p.returncode == 0, p.stderr
    lines = sorted(line for line in p.stdout.splitlines() if line.startswith("TASK "))
    assert lines == [f"TASK {r} pmix={r}" for r in range(4)], p.stdout
    script = shared_tmp / "batch-env.sh"
    script.write_text("#!/bin/bash\necho BATCH pmix=${PMIX_RANK:-none}\n")
    res = cluster.run_job(str(script), ["-N1", "-o", str(shared_tmp / "batch-env-%j.out")],
                          timeout=120)
    assert res.state == "COMPLETED" and "BATCH pmix=none" in res.output, res.output
