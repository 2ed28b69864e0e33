"""The lab's two networks (scripts/cluster.sh), seen from the host: a node's fabric and
management interfaces and their byte counters, for the tests that care which network carried a
job's traffic, not only that the job worked.

The counters are the kernel's for the interface in the node's network namespace (what
/sys/class/net/IF/statistics/{rx,tx}_bytes says there), read with `ip -n NODE -s -j link`.
"""

from __future__ import annotations

import json
import subprocess
from typing import Dict, List, Tuple


def interfaces(node: str) -> Tuple[List[str], List[str]]:
    """(fabric, management) interface names of a lab node, by its site's naming."""
    if node.startswith("jwb"):
        return [node + "i"], ["eth0"]
    if node.startswith("jpbo-"):
        return ["ib0"], ["eth0"]
    if node.startswith("nid"):
        return [f"hsn{j}" for j in range(4)], ["nmn0"]
    raise ValueError(f"{node}: no management network in the lab (one network: the fabric)")


def _bytes(node: str, ifname: str) -> int:
    p = subprocess.run(["ip", "-n", node, "-s", "-j", "link", "show", "dev", ifname],
                       capture_output=True, text=True, timeout=10, check=True)
    stats = json.loads(p.stdout)[0]["stats64"]
    return int(stats["rx"]["bytes"]) + int(stats["tx"]["bytes"])


def counters(nodes: List[str]) -> Dict[str, Dict[str, int]]:
    """Bytes received plus sent so far, per node: {"fabric": ..., "management": ...}."""
    out = {}
    for node in nodes:
        fabric, mgmt = interfaces(node)
        out[node] = {"fabric": sum(_bytes(node, i) for i in fabric),
                     "management": sum(_bytes(node, i) for i in mgmt)}
    return out


def since(before: Dict[str, Dict[str, int]]) -> Dict[str, Dict[str, int]]:
    """What each network of each node carried since ``before`` (counters())."""
    now = counters(list(before))
    return {node: {net: now[node][net] - before[node][net] for net in before[node]}
            for node in before}
