"""Ring 3 without Slurm: the doctor's node script on two network namespaces of its own
(``docn1``, ``docn2``: one veth pair, 10.88.0.1 and .2), with and without every packet
between them dropped (iptables in docn1). The kit's entry runs as the jobscript runs it
(``python3 -I KIT/node/run.py doctor node ...``), its reports are collected by the same entry
(``doctor table``).
Nothing shared is touched: the namespaces are this test's and removed afterwards.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from typing import Iterator, List, Tuple

import pytest

from launcher import kit

NODES = ("docn1", "docn2")
ADDR = {"docn1": "10.88.0.1", "docn2": "10.88.0.2"}
PORT = 28432


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


def _down() -> None:
    for ns in NODES:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)


@pytest.fixture(scope="module")
def pair() -> Iterator[None]:
    _down()
    for ns in NODES:
        _ip("netns", "add", ns)
        _ip("-n", ns, "link", "set", "lo", "up")
    _ip("link", "add", "docn1i", "netns", "docn1", "type", "veth", "peer", "name", "docn2i",
        "netns", "docn2")
    for ns in NODES:
        _ip("-n", ns, "addr", "add", f"{ADDR[ns]}/24", "dev", f"{ns}i")
        _ip("-n", ns, "link", "set", f"{ns}i", "up")
    yield
    _down()


def _doctor(conf: str = '{"runtime": "bare", "program": "python3", "timeout": 3.0}'
            ) -> Tuple[int, List[str], float]:
    entry = [sys.executable, "-I", str(kit.installed() / "node" / "run.py"), "doctor"]
    start = time.monotonic()
    procs = [subprocess.Popen(["nsenter", f"--net=/run/netns/{ns}", "--", *entry,
                               "node", conf, ADDR["docn1"], str(PORT), "--"],
                              env={"PATH": "/usr/bin:/bin", "SLURM_NODEID": str(i),
                                   "SLURM_STEP_NUM_NODES": "2", "SLURMD_NODENAME": ns},
                              stdout=subprocess.PIPE, text=True)
             for i, ns in enumerate(NODES)]
    out = "".join(p.communicate(timeout=30)[0] for p in procs)
    took = time.monotonic() - start
    done = subprocess.run([*entry, "table", conf, ADDR["docn1"], str(PORT), " ".join(NODES)],
                          input=out, capture_output=True, text=True, check=False)
    return done.returncode, done.stdout.splitlines(), took


def test_healthy_pair_passes(pair):
    rc, lines, _ = _doctor()
    assert rc == 0, "\n".join(lines)
    assert lines[-1] == "doctor: all checks passed"
    # name, same, first, tcp (connect + answer), the interface torchrun_jsc would pick
    assert any(re.match(r"docn2 +10\.88\.0\.1 +yes +yes +\d+ ms +docn2i ", l) for l in lines), \
        "\n".join(lines)


def test_dropped_traffic_is_named_within_seconds(pair):
    assert shutil.which("iptables"), "iptables missing (Debian's apptainer pulls it in: make setup)"
    ns = ["nsenter", "--net=/run/netns/docn1", "--", "iptables", "-w"]
    rules = [["INPUT", "-s", ADDR["docn2"], "-j", "DROP"],
             ["OUTPUT", "-d", ADDR["docn2"], "-j", "DROP"]]
    try:
        for rule in rules:
            subprocess.run([*ns, "-I", *rule], check=True)
        rc, lines, took = _doctor()
    finally:
        for rule in rules:
            subprocess.run([*ns, "-D", *rule], check=False)
    assert rc == 1
    assert "docn2 tcp: 10.88.0.1 port 28432: no answer within the deadline: packets are " \
           "dropped (firewall, or no route back)" in lines, "\n".join(lines)
    assert lines[-1] == "doctor: 1 check failed on 1 node"
    assert took < 10
