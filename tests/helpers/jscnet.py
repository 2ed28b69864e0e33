"""A JSC-like network of N nodes in namespaces, for the launcher's real tests and the bench.

Each node: its own network namespace, its own hostname (UTS namespace) and its own
/etc/hosts (mount namespace, bind-mounted, so nothing on the host changes). The nodes are
joined by a bridge (in a namespace of its own) through veths named hostname + ``i``; the
plain hostname resolves to an address on the node's loopback interface that no other node
can reach. So, as on JSC, the nodes talk only through the ``i`` names. Names start with ``tjsc`` (the cluster uses ``jwb``).

Two more views of the same link, for address-choice tests: ``hosts_debian`` (one file per
node, as Debian/Ubuntu write it: the node's own hostname is 127.0.1.1 *and* its cluster
address 172.31.0.N, which sorts after 127.) and, in every hosts file, ``hostname + d``
with an AAAA (fd77::N, on the link) listed before its A record (10.77.1.N). Every node gets
an /etc/host.conf with ``multi on``, so all addresses of a name are returned as on Debian.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

SWITCH = "tjsc-switch"  # a namespace holding only the bridge: nothing changes on the host


def node_names(n: int) -> Tuple[str, ...]:
    return tuple(f"tjsc{i:04d}" for i in range(1, n + 1))


NODES = node_names(2)


def fast_addr(node: str) -> str:
    return f"10.77.1.{int(node[4:])}"


def mgmt_addr(node: str) -> str:
    return f"10.78.0.{int(node[4:])}"


def generic_addr(node: str) -> str:
    """The plain hostname's cluster address in the Debian-style hosts (after 127. in sort)."""
    return f"172.31.0.{int(node[4:])}"


def v6_addr(node: str) -> str:
    return f"fd77::{int(node[4:])}"


Hosts = Union[str, Mapping[str, str]]  # one /etc/hosts for every node, or one per node


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


def _netns(node: str) -> str:
    return f"tjsc-{node}"


@dataclass
class JscNet:
    nodes: Tuple[str, ...]
    hosts_jsc: str      # hostname -> management address (unreachable from the peers)
    hosts_shared: str   # control: hostname -> the shared segment
    hosts_debian: Dict[str, str] = field(default_factory=dict)  # per node (see above)
    host_conf: str = ""  # "multi on", bound over /etc/host.conf when set

    def command(self, node: str, argv: Sequence[str], hosts: Hosts) -> List[str]:
        """argv run on ``node``: its netns, its hostname, the given /etc/hosts."""
        path = hosts if isinstance(hosts, str) else hosts[node]
        script = ('hostname "$1" && mount --bind "$2" /etc/hosts && '
                  '{ [ -z "$3" ] || mount --bind "$3" /etc/host.conf; } && shift 3 && exec "$@"')
        return ["nsenter", f"--net=/run/netns/{_netns(node)}", "--",
                "unshare", "--uts", "--mount", "--propagation", "private", "--",
                "sh", "-c", script, "sh", node, path, self.host_conf, *argv]

    def run_all(self, argv: Sequence[str], hosts: Hosts, cwd: str, timeout: float,
                env: Optional[Dict[str, Dict[str, str]]] = None) -> List[Tuple[int, str]]:
        """Start argv on every node at once; (rc, stdout+stderr) per node, bounded by timeout."""
        procs = [subprocess.Popen(self.command(node, argv, hosts), cwd=cwd,
                                  env=_clean_env((env or {}).get(node, {})),
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                 for node in self.nodes]
        deadline = time.monotonic() + timeout
        results = []
        for p in procs:
            try:
                out, _ = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                # Not only p: workers the launcher started would keep the output pipe open.
                for node in self.nodes:
                    kill_node_processes(node)
                out = p.communicate()[0] + "\n<killed: node timeout>"
            results.append((p.returncode, out))
        return results


def kill_node_processes(node: str) -> None:
    """SIGKILL every process in the node's network namespace (all of them are the test's)."""
    pids = subprocess.run(["ip", "netns", "pids", _netns(node)], capture_output=True,
                          text=True).stdout.split()
    for pid in pids:
        try:
            os.kill(int(pid), 9)
        except ProcessLookupError:
            pass


def _clean_env(extra: Dict[str, str]) -> Dict[str, str]:
    """The caller's environment without launcher/Slurm/socket variables, plus ``extra``."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM_", "TORCHRUN_JSC_", "GLOO_", "NCCL_", "PET_"))}
    env.update(extra)
    return env


def down() -> None:
    listing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    for name in (line.split()[0] for line in listing.splitlines() if line.strip()):
        if name.startswith("tjsc-"):
            kill_node_processes(name[len("tjsc-"):])
            subprocess.run(["ip", "netns", "del", name], capture_output=True)


def up(workdir: str, n: int = 2) -> JscNet:
    """Create ``n`` nodes on one bridge (removing leftovers of an earlier run first)."""
    if os.geteuid() != 0:
        raise RuntimeError("the JSC-like network needs root (network namespaces)")
    down()
    nodes = node_names(n)
    _ip("netns", "add", SWITCH)
    _ip("-n", SWITCH, "link", "add", "br0", "type", "bridge")
    _ip("-n", SWITCH, "link", "set", "br0", "up")
    for node in nodes:
        ns = _netns(node)
        _ip("netns", "add", ns)
        _ip("-n", ns, "link", "set", "lo", "up")
        # No dummy module in every kernel: the management address lives on lo, unroutable.
        _ip("-n", ns, "addr", "add", f"{mgmt_addr(node)}/32", "dev", "lo")
        _ip("link", "add", f"{node}i", "netns", ns, "type", "veth",
            "peer", "name", f"p{node}", "netns", SWITCH)
        _ip("-n", SWITCH, "link", "set", f"p{node}", "master", "br0", "up")
        _ip("-n", ns, "addr", "add", f"{fast_addr(node)}/24", "dev", f"{node}i")
        _ip("-n", ns, "addr", "add", f"{generic_addr(node)}/24", "dev", f"{node}i")
        _ip("-n", ns, "addr", "add", f"{v6_addr(node)}/64", "dev", f"{node}i", "nodad")
        _ip("-n", ns, "link", "set", f"{node}i", "up")
    debian = {n: _hosts_file(workdir, f"hosts_debian_{n}", nodes, generic_addr, own=n)
              for n in nodes}
    return JscNet(nodes, _hosts_file(workdir, "hosts_jsc", nodes, mgmt_addr),
                  _hosts_file(workdir, "hosts_shared", nodes, fast_addr), debian,
                  _write(workdir, "host.conf", "multi on\n"))


def _hosts_file(workdir: str, name: str, nodes: Sequence[str], plain: Callable[[str], str],
                own: str = "") -> str:
    lines = ["127.0.0.1 localhost"]
    lines += [f"127.0.1.1 {own}"] if own else []  # Debian's line for the own hostname
    lines += ["::1 localhost ip6-localhost"]
    lines += [f"{plain(n)} {n}" for n in nodes]
    lines += [f"{fast_addr(n)} {n}i" for n in nodes]
    lines += [f"{v6_addr(n)} {n}d\n{fast_addr(n)} {n}d" for n in nodes]  # AAAA first
    lines += [f"{fast_addr(n)} tjscmixed" for n in nodes[:2]]  # on two nodes at once
    return _write(workdir, name, "\n".join(lines) + "\n")


def _write(workdir: str, name: str, text: str) -> str:
    fd, path = tempfile.mkstemp(prefix=f"{name}-", dir=workdir)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return path
