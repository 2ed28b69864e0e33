"""The interface rule: resolve a host, pick its best address, find the local interface that
reaches it. The only module of the rule that touches sockets.

Where it sits: host -> ``resolve_host`` -> ``addresses.candidates`` -> ``find_route`` (a
``Route``: the address, the source address the kernel picks towards it, its interface) ->
torchrun_jsc (launcher/task/torchrun_jsc/netinfo.py), the Ray agent, the doctor, and every task
script through ``task_env_main`` (launcher/node/run.py ``net-env``, from launcher/node/task.sh).
No reverse DNS anywhere (an interface address without a name must not matter), nothing that
can hang: name resolution runs in a daemon thread with a deadline, and the source address is
found with a UDP ``connect`` (no packet is sent) towards the best candidate, never simply the
first address the resolver gives.

Node-side code (docs/development/node-code.md): standard library only, Python 3.6.
"""

import ctypes
import ctypes.util
import ipaddress
import os
import shlex
import socket
import sys
import threading
from typing import Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from launcher.node.net.addresses import (DEFAULT_RESOLVE_TIMEOUT_S, ENDPOINT_FLAG, LaunchError,
                                    address_family, candidates, resolve_timeout)

GLOO_VAR, NCCL_VAR = "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"
MPI_IFNAME_VARS = ("OMPI_MCA_btl_tcp_if_include", "HOROVOD_GLOO_IFACE")


class _SockAddr(ctypes.Structure):
    _fields_ = [("family", ctypes.c_ushort), ("data", ctypes.c_ubyte * 14)]


class _SockAddrIn(ctypes.Structure):
    _fields_ = [("family", ctypes.c_ushort), ("port", ctypes.c_uint16),
                ("addr", ctypes.c_ubyte * 4), ("zero", ctypes.c_ubyte * 8)]


class _SockAddrIn6(ctypes.Structure):
    _fields_ = [("family", ctypes.c_ushort), ("port", ctypes.c_uint16),
                ("flowinfo", ctypes.c_uint32), ("addr", ctypes.c_ubyte * 16),
                ("scope_id", ctypes.c_uint32)]


class _IfAddrs(ctypes.Structure):
    pass


_IfAddrs._fields_ = [("next", ctypes.POINTER(_IfAddrs)), ("name", ctypes.c_char_p),
                     ("flags", ctypes.c_uint), ("addr", ctypes.POINTER(_SockAddr)),
                     ("netmask", ctypes.POINTER(_SockAddr)), ("ifu", ctypes.POINTER(_SockAddr)),
                     ("data", ctypes.c_void_p)]


class Route(NamedTuple):
    """What the network says about a host: ``addresses`` in resolver order, ``local_matches``
    (those assigned to this machine), ``target`` (the best candidate with a route, or None),
    ``source`` (the local address the kernel uses towards it) and ``ifname`` (its interface)."""

    addresses: Tuple[str, ...]
    local_matches: Tuple[str, ...]
    target: Optional[str]
    source: Optional[str]
    ifname: Optional[str]


def interface_addresses() -> Dict[str, str]:
    """Every IPv4/IPv6 address on this machine (secondary ones too) -> its interface name.

    Uses getifaddrs(3) through ctypes, so it needs neither psutil nor iproute2.
    """
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    head = ctypes.POINTER(_IfAddrs)()
    if libc.getifaddrs(ctypes.byref(head)) != 0:
        return {}
    out = {}  # type: Dict[str, str]
    try:
        node = head
        while node:
            ifa = node.contents
            if ifa.addr:
                family = ifa.addr.contents.family
                name = ifa.name.decode(errors="replace")
                if family == socket.AF_INET:
                    raw = ctypes.cast(ifa.addr, ctypes.POINTER(_SockAddrIn)).contents.addr
                    out[str(ipaddress.IPv4Address(bytes(raw)))] = name
                elif family == socket.AF_INET6:
                    raw = ctypes.cast(ifa.addr, ctypes.POINTER(_SockAddrIn6)).contents.addr
                    out[str(ipaddress.IPv6Address(bytes(raw)))] = name
            node = ifa.next
    finally:
        libc.freeifaddrs(head)
    return out


def resolve_host(host: str, port: int = 0, timeout: float = DEFAULT_RESOLVE_TIMEOUT_S,
                 what: str = ENDPOINT_FLAG) -> Tuple[str, ...]:
    """Addresses of ``host``, in resolver order; LaunchError if none within ``timeout``."""
    result = []  # type: List[object]

    def work() -> None:
        try:
            result.append(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
        except (OSError, UnicodeError) as e:
            result.append(e)

    t = threading.Thread(target=work, daemon=True)
    t.start()
    t.join(timeout)
    if not result:
        raise LaunchError("{}: resolving {!r} took longer than {} s (check DNS or "
                          "/etc/hosts)".format(what, host, timeout))
    if isinstance(result[0], Exception):
        cause = getattr(result[0], "strerror", None) or str(result[0])
        raise LaunchError("{}: host {!r} does not resolve: {}".format(what, host, cause))
    seen = {}  # type: Dict[str, None]
    for family, _, _, _, sockaddr in result[0]:  # type: ignore
        if family in (socket.AF_INET, socket.AF_INET6):
            seen.setdefault(str(ipaddress.ip_address(sockaddr[0].split("%")[0])), None)
    if not seen:
        raise LaunchError("{}: host {!r} has no IPv4/IPv6 address".format(what, host))
    return tuple(seen)


def source_address(addr: str, port: int) -> Optional[str]:
    """The local address the kernel picks to reach ``addr`` (UDP connect sends nothing)."""
    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        try:
            s.connect((addr, port or 9))
        except OSError:
            return None
        return str(ipaddress.ip_address(s.getsockname()[0].split("%")[0]))


def find_route(host: str, port: int = 0, family: str = "auto",
               timeout: float = DEFAULT_RESOLVE_TIMEOUT_S, what: str = ENDPOINT_FLAG) -> Route:
    """Resolve ``host``, match its addresses against ours, and find the source address (and
    interface) towards the best candidate that has a route."""
    addresses = resolve_host(host, port, timeout, what)
    chosen = candidates(host, addresses, family, what)
    local = interface_addresses()
    matches = tuple(a for a in addresses if a in local)
    for a in chosen:
        src = source_address(a, port)
        if src is not None:
            return Route(addresses, matches, a, src, local.get(src))
    return Route(addresses, matches, None, None, None)


def socket_env(env: Mapping[str, str], ifname: str, mpi: bool = False
               ) -> List[Tuple[str, str]]:
    """What a task exports: GLOO_SOCKET_IFNAME unless set; NCCL_SOCKET_IFNAME unless set, as
    NCCL exact form =NAME (a plain name is a prefix: ib0 also matches ib01); with ``mpi``,
    Open MPI TCP transport and Horovod gloo controller likewise. Set values win."""
    gloo = env.get(GLOO_VAR) or ifname
    out = [] if env.get(GLOO_VAR) else [(GLOO_VAR, gloo)]
    if not env.get(NCCL_VAR):
        out.append((NCCL_VAR, "=" + gloo.lstrip("=")))
    for name in MPI_IFNAME_VARS if mpi else ():
        if not env.get(name):
            out.append((name, gloo))
    return out


def task_env_main(argv: Sequence[str], env: Optional[Mapping[str, str]] = None) -> int:
    """``[--mpi] MASTER_ADDR``: print the export lines of ``socket_env`` for the task script
    to eval; unless GLOO_SOCKET_IFNAME is set, the interface is the one that reaches
    MASTER_ADDR by this rule, and no fallback: an error is one line on stderr and exit 1."""
    env = os.environ if env is None else env
    mpi = argv[:1] == ["--mpi"]
    host = argv[1] if mpi else (argv[0] if argv else "")
    ifname = env.get(GLOO_VAR, "")
    if not ifname:
        try:
            if not host:
                raise LaunchError("MASTER_ADDR is not set: the task script picks the socket "
                                  "interface that reaches it")
            route = find_route(host, 0, address_family(env), resolve_timeout(env),
                               "MASTER_ADDR")
        except LaunchError as e:
            sys.stderr.write("{}\n".format(e))
            return 1
        if not route.ifname:
            sys.stderr.write("no interface reaches MASTER_ADDR={}\n".format(host))
            return 1
        ifname = route.ifname
    for name, value in socket_env(env, ifname, mpi):
        sys.stdout.write("export {}={}\n".format(name, shlex.quote(value)))
    return 0
