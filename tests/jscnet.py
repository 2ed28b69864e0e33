"""A two-node JSC-like network in namespaces, for the launcher's real tests (ring 3, root).

Each node: its own network namespace, its own hostname (UTS namespace) and its own
/etc/hosts (mount namespace, bind-mounted, so nothing on the host changes). The nodes are
joined by one veth pair whose ends are named hostname + ``i``; the plain hostname resolves
to an address on the node's loopback interface that the other node cannot reach. So, as on JSC, the
nodes talk only through the ``i`` names. Names start with ``tjsc`` (the cluster uses ``jwb``).
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from dataclasses import dataclass
from typing import List, Sequence

NODES = ("tjsc0001", "tjsc0002")
FAST = {"tjsc0001": "10.77.1.1", "tjsc0002": "10.77.1.2"}
MGMT = {"tjsc0001": "10.78.0.1", "tjsc0002": "10.78.0.2"}


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


def _netns(node: str) -> str:
    return f"tjsc-{node}"


@dataclass
class JscNet:
    hosts_jsc: str      # hostname -> management address (unreachable from the peer)
    hosts_shared: str   # control: hostname -> the shared segment

    def command(self, node: str, argv: Sequence[str], hosts: str) -> List[str]:
        """argv run on ``node``: its netns, its hostname, the given /etc/hosts."""
        script = 'hostname "$1" && mount --bind "$2" /etc/hosts && shift 2 && exec "$@"'
        return ["nsenter", f"--net=/run/netns/{_netns(node)}", "--",
                "unshare", "--uts", "--mount", "--propagation", "private", "--",
                "sh", "-c", script, "sh", node, hosts, *argv]


def down() -> None:
    for node in NODES:
        subprocess.run(["ip", "netns", "del", _netns(node)], capture_output=True)


def up(workdir: str) -> JscNet:
    """Create both nodes (removing leftovers of an earlier run first)."""
    if os.geteuid() != 0:
        raise RuntimeError("the JSC-like network needs root (network namespaces)")
    down()
    a, b = NODES
    for node in NODES:
        ns = _netns(node)
        _ip("netns", "add", ns)
        _ip("-n", ns, "link", "set", "lo", "up")
        # No dummy module in every kernel: the management address lives on lo, unroutable.
        _ip("-n", ns, "addr", "add", f"{MGMT[node]}/32", "dev", "lo")
    _ip("link", "add", f"{a}i", "netns", _netns(a), "type", "veth",
        "peer", "name", f"{b}i", "netns", _netns(b))
    for node in NODES:
        ns = _netns(node)
        _ip("-n", ns, "addr", "add", f"{FAST[node]}/24", "dev", f"{node}i")
        _ip("-n", ns, "link", "set", f"{node}i", "up")
    return JscNet(_hosts_file(workdir, "hosts_jsc", MGMT), _hosts_file(workdir, "hosts_shared", FAST))


def _hosts_file(workdir: str, name: str, plain: dict) -> str:
    lines = ["127.0.0.1 localhost", "::1 localhost ip6-localhost"]
    lines += [f"{plain[n]} {n}" for n in NODES]
    lines += [f"{FAST[n]} {n}i" for n in NODES]
    fd, path = tempfile.mkstemp(prefix=f"{name}-", dir=workdir)
    with os.fdopen(fd, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path
