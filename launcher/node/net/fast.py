"""The fast-network rule: which of this node's interfaces is its fast network, and so which
host the rendezvous should name on a site without a profile (``site: generic``).

Where it sits: the batch script on the first node (``python3 -I "$kit/node/run.py" endpoint
NODE [IFNAME]``, launcher/node/job.sh ``jsc_endpoint``) -> ``choose`` -> the rendezvous host
(the node's name, or its fast interface's address) and one line saying why; the doctor
(launcher/node/doctor/node.py) names the kind of the interface each node would use and
warns where a fast one exists beside it.

Fast, in this order: the interfaces site.socket_ifname names (NCCL's syntax: ``ib0``,
``=ib0``, ``ib0,ib1``, ``^eth``), InfiniBand (IPoIB: /sys/class/net/NAME/type 32, the
kernel's ARPHRD_INFINIBAND), HPE Slingshot (``hsn*``, HPE's names for its NICs). The name
is kept wherever it resolves to an address on a fast interface of this node (JSC's ``...i``
names, a Cray EX nid name resolving to its hsn addresses), or where no fast interface has
an address. Never fails: a node this cannot judge keeps its name, with the reason.

Node-side code (docs/development/node-code.md): standard library only, Python 3.6.
"""

import fcntl
import os
import socket
import struct
import sys
from typing import List, Mapping, NamedTuple, Optional, Sequence, Tuple

from launcher.node.net.addresses import LaunchError, is_loopback
from launcher.node.net.probe import interface_addresses, resolve_host

ARPHRD_INFINIBAND = 32
SYS_NET = "/sys/class/net"


class Nic(NamedTuple):
    """One interface: its name, ARPHRD type (-1: unreadable), whether it is up, addresses."""

    name: str
    type: int
    up: bool
    addresses: Tuple[str, ...]


class Choice(NamedTuple):
    """The rendezvous host (the name, or an address) and the one line that says why."""

    host: str
    line: str


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def arphrd(name: str) -> int:
    """The interface's ARPHRD type from the kernel (SIOCGIFHWADDR: the hardware address's
    family), in this process's network namespace; -1 where it cannot be asked."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            req = fcntl.ioctl(s.fileno(), 0x8927, struct.pack("256s", name.encode()[:15]))
    except OSError:
        return -1
    return struct.unpack_from("H", req, 16)[0]


def nics(addresses: Mapping[str, str], sys_net: str = SYS_NET) -> List[Nic]:
    """This node's interfaces: those ``sys_net`` (/sys/class/net) lists and those that hold
    ``addresses`` (address -> interface, probe.interface_addresses, which always sees this
    network namespace: a /sys mounted for another one lists other interfaces), addresses
    grouped under each; loopback left out. The type is the tree's, else the kernel's
    (``arphrd``); the state the tree's, else up."""
    try:
        listed = set(os.listdir(sys_net))
    except OSError:
        listed = set()
    out = []
    for name in sorted(listed | set(addresses.values())):
        text = _read(os.path.join(sys_net, name, "type")) if name in listed else ""
        kind = int(text) if text.isdigit() else arphrd(name)
        if kind == 772 or name == "lo":  # ARPHRD_LOOPBACK
            continue
        state = _read(os.path.join(sys_net, name, "operstate")) if name in listed else ""
        out.append(Nic(name, kind, state in ("up", "unknown", ""),
                       tuple(sorted(a for a, n in addresses.items() if n == name))))
    return out


def named_by(name: str, ifname: str) -> bool:
    """Does NCCL-style ``ifname`` select interface ``name``? (``=x`` exact, ``x`` a prefix,
    comma lists, ``^`` excludes the list)."""
    text = ifname.strip()
    exclude = text.startswith("^")
    text = text.lstrip("^")
    exact = text.startswith("=")
    wants = [w for w in text.lstrip("=").split(",") if w]
    hit = any(name == w if exact else name.startswith(w) for w in wants)
    return not hit if exclude else hit


def kind(nic: Nic, ifname: Optional[str] = None) -> Optional[str]:
    """Why ``nic`` counts as fast ('site.socket_ifname', 'InfiniBand', 'Slingshot'), or None.
    With ``ifname`` only the interfaces it names count."""
    if ifname:
        return "site.socket_ifname" if named_by(nic.name, ifname) else None
    if nic.type == ARPHRD_INFINIBAND:
        return "InfiniBand"
    if nic.name.startswith("hsn"):
        return "Slingshot"
    return None


def _ipv4(nic: Nic) -> Optional[str]:
    return next((a for a in nic.addresses if ":" not in a), None)


def fast_nics(all_nics: Sequence[Nic], ifname: Optional[str] = None) -> List[Nic]:
    """The fast interfaces that are up and have an address, best first: those with an IPv4
    address, then by name (ib0 before ib1)."""
    found = [n for n in all_nics if n.up and n.addresses and kind(n, ifname)]
    return sorted(found, key=lambda n: (_ipv4(n) is None, n.name))


def choose(node: str, resolved: Sequence[str], all_nics: Sequence[Nic],
           ifname: Optional[str] = None) -> Choice:
    """The rendezvous host for ``node`` (this machine), whose name resolves to ``resolved``
    (empty: it does not)."""
    owner = {a: n for n in all_nics for a in n.addresses}
    fast = fast_nics(all_nics, ifname)
    on = ", ".join("{} on {}".format(a, owner[a].name) if a in owner else a
                   for a in resolved) or "nothing"
    why = "site.socket_ifname {}".format(ifname) if ifname else \
        "InfiniBand (IPoIB) or Slingshot (hsn*)"
    local_fast = [owner[a] for a in resolved if a in owner and owner[a] in fast]
    if local_fast:
        n = local_fast[0]
        return Choice(node, "rendezvous host {}: it resolves to {} ({}, fast)".format(
            node, on, kind(n, ifname)))
    if not fast:
        return Choice(node, "rendezvous host {}: it resolves to {}; no {} interface with an "
                            "address on this node".format(node, on, why))
    best = fast[0]
    addr = _ipv4(best)
    if addr is None:  # an IPv6 literal would need brackets in an endpoint, none in MASTER_ADDR
        return Choice(node, "rendezvous host {}: it resolves to {}; the {} interface {} has "
                            "no IPv4 address".format(node, on, kind(best, ifname), best.name))
    return Choice(addr, "rendezvous host {}: {}'s {} interface {}, since its name resolves "
                        "to {} (set site.hostname_suffix to rendezvous by name)".format(
                            addr, node, kind(best, ifname), best.name, on))


def endpoint_main(argv: Sequence[str], sys_net: str = SYS_NET) -> int:
    """``NODE [IFNAME]``: print the rendezvous host on stdout, the line why on stderr.
    Off the node (an salloc shell on a login node: SLURMD_NODENAME is another node or unset)
    the name is kept: this machine's interfaces say nothing of the node's."""
    node = argv[0] if argv else ""
    ifname = argv[1] if len(argv) > 1 and argv[1] else None
    here = os.environ.get("SLURMD_NODENAME", "")
    if not node or here.split(".")[0] != node.split(".")[0]:
        sys.stdout.write(node + "\n")
        sys.stderr.write("rendezvous host {}: by name, chosen off the node ({})\n".format(
            node, here or "no SLURMD_NODENAME"))
        return 0
    try:
        try:
            found = resolve_host(node, 0, 5.0, "the first node")  # type: Sequence[str]
        except LaunchError:
            found = ()
        resolved = [a for a in found if not is_loopback(a)] or list(found)
        choice = choose(node, resolved, nics(interface_addresses(), sys_net), ifname)
    except Exception as exc:  # the rule must never cost the job: the name, and why
        choice = Choice(node, "rendezvous host {}: by name (the fast-network rule failed: "
                              "{})".format(node, " ".join(str(exc).split()) or type(exc).__name__))
    sys.stdout.write(choice.host + "\n")
    sys.stderr.write(choice.line + "\n")
    return 0


__all__ = ["ARPHRD_INFINIBAND", "Choice", "Nic", "choose", "endpoint_main", "fast_nics",
           "kind", "named_by", "nics"]
