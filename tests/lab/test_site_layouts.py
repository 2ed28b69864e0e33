"""Ring 3: the lab's other sites, beside JUWELS Booster in the same cluster
(scripts/cluster.sh: partitions jupiter, cray, fqdn, two nodes each), with the profile a user
there would pick: JUPITER `site: jsc` (with SYSTEMNAME=jupiter and without), Cray EX and the
FQDN-hostname site `site: generic`. On each: the demo program (examples/ddp_train.py) in
torchrun mode, examples/distributed_sum.py in srun mode and the doctor, through the composer,
2 nodes; the endpoint line, the summaries and the doctor's table are checked, not only exit
codes. Before that, each layout's network from a node (nsenter, no job): management names
reachable over the management network (Slurm's, slow), the fabric names over the fabric, all four Slingshot addresses of a Cray node
answered by their own NIC.

One module fixture starts every doctor and submits every job at once: the three partitions
run in parallel, a partition's jobs one after another (exclusive nodes); each test then waits
for its own job.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
VENV = os.environ.get("VENV", str(REPO / ".venv"))
STATE = Path("/run/torchrun-jsc-cluster")
CLUSTER = ["bash", str(REPO / "scripts/cluster.sh")]
TIMEOUT_S = 300
ENDPOINT = re.compile(r"^job (\d+): 2 nodes, rendezvous (\S+):(\d+)$", re.M)


@dataclass(frozen=True)
class Layout:
    partition: str
    profile: str
    nodes: Tuple[str, str]  # Slurm node names
    hostnames: Tuple[str, str]  # what the nodes' hostname says
    endpoints: Tuple[str, ...]  # rendezvous hosts a user of the site may get
    fabric: Dict[str, str]  # the first node's reachable addresses -> their NIC
    site: Tuple[Tuple[str, str], ...] = ()  # more site keys


LAYOUTS = {
    "jupiter": Layout("jupiter", "jsc", ("jpbo-001-01", "jpbo-001-02"),
                      ("jpbo-001-01", "jpbo-001-02"),
                      ("jpbo-001-01-interconnect-1.jupiter.internal",), {"10.66.1.1": "ib0"}),
    # The nid name resolves to every Slingshot NIC (hsn*: fast): generic keeps the name.
    "cray": Layout("cray", "generic", ("nid000001", "nid000002"), ("nid000001", "nid000002"),
                   ("nid000001",), {f"10.66.{20 + j}.1": f"hsn{j}" for j in range(4)}),
    # The profile a Cray EX user picks: the same rule, Slingshot's defaults, and (the lab's
    # image has no libfabric plugin) the one line that NCCL would run over TCP.
    "cray-ex": Layout("cray", "cray-ex", ("nid000001", "nid000002"), ("nid000001", "nid000002"),
                      ("nid000001",), {f"10.66.{20 + j}.1": f"hsn{j}" for j in range(4)}),
    # No fast interface (the short name resolves to the one reachable address): the name.
    "fqdn": Layout("fqdn", "generic", ("lrdn0001", "lrdn0002"),
                   ("lrdn0001.leonardo.local", "lrdn0002.leonardo.local"),
                   ("lrdn0001",), {"10.66.3.1": "eth0"}),
    # JUPITER without a profile: the plain name is the management address, so generic's rule
    # takes the interface site.socket_ifname names (the lab's ib0 is no IPoIB device).
    "jupiter-generic": Layout("jupiter", "generic", ("jpbo-001-01", "jpbo-001-02"),
                              ("jpbo-001-01", "jpbo-001-02"), ("10.66.1.1",),
                              {"10.66.1.1": "ib0"}, (("socket_ifname", "ib0"),)),
}
# (layout, launch mode, SYSTEMNAME in the submit environment). JUPITER: the suffix listed for
# SYSTEMNAME, and without it the candidate that resolves (launcher/model.py JSC_SUFFIXES).
JOBS = [("jupiter", "torchrun", "jupiter"), ("jupiter", "srun", None),
        ("cray", "torchrun", None), ("cray", "srun", None), ("cray-ex", "torchrun", None),
        ("fqdn", "torchrun", None), ("fqdn", "srun", None), ("jupiter-generic", "srun", None)]
# The line of the kit's rule for site generic (launcher/node/net/fast.py), by layout.
WHY = {"cray": "rendezvous host nid000001: it resolves to 10.66.20.1 on hsn0, 10.66.21.1 on "
               "hsn1, 10.66.22.1 on hsn2, 10.66.23.1 on hsn3 (Slingshot, fast)",
       "fqdn": "rendezvous host lrdn0001: it resolves to 10.66.3.1 on eth0; no InfiniBand "
               "(IPoIB) or Slingshot (hsn*) interface with an address on this node",
       "jupiter-generic": "rendezvous host 10.66.1.1: jpbo-001-01's site.socket_ifname "
                          "interface ib0, since its name resolves to 10.67.1.1 on eth0 (set "
                          "site.hostname_suffix to rendezvous by name)"}
NO_PLUGIN = ("torchrun-jsc: no NCCL net plugin (aws-ofi-nccl; tried libnccl-net.so, "
             "librccl-net.so): NCCL between nodes runs over TCP sockets")
DOCTORS = [("jupiter", "jupiter"), ("cray", None), ("fqdn", None)]
PROGRAMS = {"torchrun": [str(REPO / "examples/ddp_train.py"), "--steps", "5"],
            "srun": [str(REPO / "examples/distributed_sum.py")]}

# Run in a node's namespaces: resolve names, try the slurmd port (6818) on every address.
PROBE = r"""
import json, socket, sys
res = {"me": socket.gethostname(), "names": {}}
for name in sys.argv[1:]:
    try:
        addrs = list(dict.fromkeys(a[4][0] for a in socket.getaddrinfo(name, None, socket.AF_INET)))
    except socket.gaierror:
        res["names"][name] = None
        continue
    reach = {}
    for addr in addrs:
        try:
            socket.create_connection((addr, 6818), timeout=3).close()
            reach[addr] = "reachable"
        except OSError as e:
            reach[addr] = e.errno
    res["names"][name] = reach
print(json.dumps(res))
"""

# Run in a node: ARP who-has for each target out of one NIC (argv: NIC, its address, targets);
# prints {target: [the MAC of every answer]}, collecting answers for half a second.
ARP_PROBE = r"""
import json, socket, sys, time
nic, me, targets = sys.argv[1], socket.inet_aton(sys.argv[2]), sys.argv[3:]
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0806))
s.bind((nic, 0))
mac = s.getsockname()[4]
for t in targets:
    arp = b"\x00\x01\x08\x00\x06\x04\x00\x01" + mac + me + b"\x00" * 6 + socket.inet_aton(t)
    s.send(b"\xff" * 6 + mac + b"\x08\x06" + arp)
seen = {t: set() for t in targets}
end = time.monotonic() + 0.5
while (left := end - time.monotonic()) > 0:
    s.settimeout(left)
    try:
        frame = s.recv(100)
    except socket.timeout:
        break
    arp = frame[14:42]
    sender = socket.inet_ntoa(arp[14:18])
    if arp[6:8] == b"\x00\x02" and sender in seen:
        seen[sender].add(arp[8:14].hex(":"))
print(json.dumps({t: sorted(m) for t, m in seen.items()}))
"""


def sh(argv: List[str], timeout: float = 60, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False,
                          **kw)


def on_node(node: str, argv: List[str]) -> str:
    """ARGV in the node's network, UTS and mount namespaces (its /etc/hosts), as its slurmd."""
    pid = (STATE / f"slurmd-{node}.pid").read_text().strip()
    p = sh(["nsenter", "-t", pid, "-n", "-u", "-m", *argv])
    assert p.returncode == 0, p.stderr
    return p.stdout


def probe(node: str, *names: str) -> dict:
    return json.loads(on_node(node, ["python3", "-c", PROBE, *names]))


def test_partitions_beside_the_default_one(cluster):
    p = sh(["sinfo", "-h", "-o", "%P %D %N"])
    rows = {line.split()[0]: line.split()[1:] for line in p.stdout.splitlines()}
    assert rows["batch*"][0] == rows["urgent"][0], p.stdout  # JUWELS Booster, the default
    assert rows["jupiter"] == ["2", "jpbo-001-[01-02]"], p.stdout
    assert rows["cray"] == ["2", "nid[000001-000002]"], p.stdout
    assert rows["fqdn"] == ["2", "lrdn[0001-0002]"], p.stdout


def test_jupiter_network(cluster):
    r = probe("jpbo-001-02", "jpbo-001-01", "jpbo-001-01-interconnect-1.jupiter.internal",
              "jpbo-001-01i", "jpbo-001-02")
    assert r["me"] == "jpbo-001-02"
    names = r["names"]
    assert names["jpbo-001-01"] == {"10.67.1.1": "reachable"}, r  # management (eth0)
    assert names["jpbo-001-01-interconnect-1.jupiter.internal"] == {"10.66.1.1": "reachable"}
    assert names["jpbo-001-01i"] is None, r  # JUWELS' suffix means nothing here
    assert list(names["jpbo-001-02"]) == ["127.0.1.1", "10.67.1.2"], r  # Debian-style


def test_cray_network_every_nic_answers_for_itself(cluster):
    r = probe("nid000002", "nid000001", "nid000001-nmn", "nid000002")
    hsn = [f"10.66.{20 + j}.1" for j in range(4)]
    assert r["names"]["nid000001"] == {a: "reachable" for a in hsn}, r
    assert r["names"]["nid000001-nmn"] == {"10.67.2.1": "reachable"}, r  # management (nmn0)
    assert list(r["names"]["nid000002"]) == ["127.0.1.1"] + [f"10.66.{20 + j}.2"
                                                             for j in range(4)], r
    # Four NICs in one subnet: each address must be answered (ARP) by its own NIC and by no
    # other (Linux's default answers for every address on every NIC: ARP flux).
    macs = {a["ifname"]: a["address"]
            for a in json.loads(on_node("nid000001", ["ip", "-j", "link"]))}
    answers = json.loads(on_node("nid000002", ["python3", "-c", ARP_PROBE, "hsn0",
                                                "10.66.20.2", *hsn]))
    assert answers == {a: [macs[f"hsn{j}"]] for j, a in enumerate(hsn)}, (answers, macs)
    assert len({macs[f"hsn{j}"] for j in range(4)}) == 4, macs


def test_fqdn_network(cluster):
    r = probe("lrdn0002", "lrdn0001", "lrdn0001.leonardo.local", "lrdn0002")
    assert r["me"] == "lrdn0002.leonardo.local"
    assert r["names"]["lrdn0001"] == r["names"]["lrdn0001.leonardo.local"] == \
        {"10.66.3.1": "reachable"}, r
    assert list(r["names"]["lrdn0002"]) == ["127.0.1.1", "10.66.3.2"], r


def test_bad_and_other_layouts_are_refused_in_one_line(cluster):
    for sites, says in (("jupiter bogus", "JWB_CLUSTER_SITES: unknown site 'bogus' (known: "
                                          "jupiter cray fqdn)"),
                        ("cray", "cluster is up with")):
        p = sh(CLUSTER + ["up"], env=dict(os.environ, JWB_CLUSTER_SITES=sites))
        assert p.returncode == 1 and p.stderr.count("\n") == 1 and says in p.stderr, p.stderr
    assert sh(["sinfo", "-h", "-p", "cray", "-o", "%D"]).stdout.strip() == "2"


def submit_env(systemname: Optional[str]) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("SLURM_") and k != "SYSTEMNAME"}
    env["PYTHONPATH"] = str(REPO)
    if systemname:
        env["SYSTEMNAME"] = systemname
    return env


def write_spec(folder: Path, name: str, layout: Layout, mode: str) -> str:
    (folder / f"{name}.yaml").write_text(yaml.safe_dump({
        "job": {"nodes": 2, "name": name, "time": "00:05:00", "partition": layout.partition,
                "node_output": None},
        "site": {"profile": layout.profile, "venv": VENV, **dict(layout.site)},
        "runtime": {"kind": "bare"},
        "launch": {"mode": mode, "procs_per_node": 1},
        "program": ["python3", "-u", *PROGRAMS[mode]]}))
    return f"{name}.yaml"


@dataclass
class Started:
    folder: Path
    doctors: Dict[str, subprocess.Popen]
    jobs: Dict[Tuple[str, str, Optional[str]], str]  # -> job id


def job_name(layout: str, mode: str, systemname: Optional[str]) -> str:
    return f"site-{layout}-{mode}-{systemname or 'nosys'}"


def wait_queued(names: List[str], doctors: List[subprocess.Popen], timeout: float = 60) -> None:
    """Until the doctors' jobs are in the queue (or the doctors ended), so that each doctor's
    short job runs first in its partition."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        queued = set(sh(["squeue", "-h", "-o", "%j"]).stdout.split())
        if all(n in queued or d.poll() is not None for n, d in zip(names, doctors)):
            return
        time.sleep(0.1)
    pytest.fail(f"the doctors' jobs {names} did not reach the queue in {timeout:.0f} s")


@pytest.fixture(scope="module")
def started(cluster) -> Iterator[Started]:
    root = REPO / "build" / "lab-tmp"
    root.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="site_layouts-", dir=root))
    folder.chmod(0o1777)
    t0 = time.monotonic()
    doctors: Dict[str, subprocess.Popen] = {}
    jobs: Dict[Tuple[str, str, Optional[str]], str] = {}
    try:
        for layout, systemname in DOCTORS:
            name = f"doctor-{layout}"
            spec = write_spec(folder, name, LAYOUTS[layout], "srun")
            doctors[layout] = subprocess.Popen(
                [sys.executable, "-m", "launcher", "doctor", "--json", spec, "--",
                 f"--job-name={name}"], cwd=folder, env=submit_env(systemname),
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_queued([f"doctor-{layout}" for layout in doctors], list(doctors.values()))
        for key in JOBS:
            spec = write_spec(folder, job_name(*key), LAYOUTS[key[0]], key[1])
            p = sh([sys.executable, "-m", "launcher", "submit", spec], cwd=folder,
                   env=submit_env(key[2]))
            assert p.returncode == 0, p.stderr
            jobs[key] = p.stdout.strip()
        yield Started(folder, doctors, jobs)
        print(f"site layouts: every job and doctor done {time.monotonic() - t0:.1f} s after "
              "the first doctor started")
    finally:
        for d in doctors.values():
            if d.poll() is None:
                d.kill()
                d.wait()
        for job in jobs.values():
            sh(["scancel", job])
        shutil.rmtree(folder, ignore_errors=True)


def finished(cluster, started: Started, key: Tuple[str, str, Optional[str]]) -> Tuple[str, str]:
    """(the job's state, its output) once it left the queue."""
    job = started.jobs[key]
    cluster.wait_gone(job, TIMEOUT_S)
    info = cluster.job_info(job)
    out = Path(info["StdOut"])
    text = out.read_text(errors="replace") if out.exists() else f"(no output at {out})"
    print(f"{job_name(*key)}: job {job} {info.get('JobState')} "
          f"{info.get('StartTime')} -> {info.get('EndTime')}")
    return info.get("JobState", "?"), text


def endpoint_host(text: str, job: str) -> str:
    lines = ENDPOINT.findall(text)
    assert len(lines) == 1 and lines[0][0] == job, text
    return lines[0][1]


def summaries(text: str, prefix: str) -> List[dict]:
    return [json.loads(line.split(prefix, 1)[1]) for line in text.splitlines() if prefix in line]


@pytest.mark.parametrize("key", [k for k in JOBS if k[1] == "torchrun"],
                         ids=lambda k: job_name(*k))
def test_demo_program_torchrun(cluster, started, key):
    layout = LAYOUTS[key[0]]
    state, text = finished(cluster, started, key)
    assert state == "COMPLETED", text
    assert endpoint_host(text, started.jobs[key]) in layout.endpoints, text
    [summary] = summaries(text, "DDP_SUMMARY ")
    assert cluster.check_summary(summary, 2) == [], summary
    assert summary["hosts"] == list(layout.hostnames), summary
    why(text, key[0])


def why(text: str, layout: str) -> None:
    """The rendezvous rule's one line where the site has no names of its own (generic,
    cray-ex); the libfabric line once, on node 0, under cray-ex only."""
    if layout in WHY:
        assert [line for line in text.splitlines() if line.startswith("rendezvous host ")] == \
            [WHY[layout]], text
    assert text.count(NO_PLUGIN) == (1 if layout == "cray-ex" else 0), text


@pytest.mark.parametrize("key", [k for k in JOBS if k[1] == "srun"], ids=lambda k: job_name(*k))
def test_sum_srun_mode(cluster, started, key):
    layout = LAYOUTS[key[0]]
    state, text = finished(cluster, started, key)
    assert state == "COMPLETED", text
    assert endpoint_host(text, started.jobs[key]) in layout.endpoints, text
    [summary] = summaries(text, "SUM_SUMMARY ")
    assert (summary["world_size"], summary["sum"], summary["ok"]) == (2, 3, True), summary
    assert summary["hosts"] == list(layout.hostnames), summary
    why(text, key[0])


@pytest.mark.parametrize("layout_name", [d[0] for d in DOCTORS])
def test_doctor(started, layout_name):
    layout = LAYOUTS[layout_name]
    out, err = started.doctors[layout_name].communicate(timeout=TIMEOUT_S)
    assert started.doctors[layout_name].returncode == 0, out + err
    result = json.loads(out)
    assert result["ok"] is True and result["failures"] == [], result
    assert result["rendezvous"].rsplit(":", 1)[0] in layout.endpoints, result["rendezvous"]
    assert [n["node"] for n in result["nodes"]] == list(layout.nodes), result
    assert result["warnings"] == [], result
    for node in result["nodes"]:  # every node reaches the rendezvous over the fabric
        assert node["address"] in layout.fabric, node
        nic = node["checks"]["iface"]["value"]  # with its kind where it is a fast one
        assert nic.split(" (")[0] in layout.fabric.values(), node
        assert nic.endswith(" (Slingshot)") == (layout_name == "cray"), node
