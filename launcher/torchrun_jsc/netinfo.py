"""Probe the network once for torchrun_jsc: the only module here that touches sockets.

Where it sits: endpoint -> ``probe()`` -> ``NetFacts`` (a value) -> ``decide.decide``.
No reverse DNS anywhere (an interface address without a name must not matter), nothing
that can hang: name resolution runs in a daemon thread with a deadline
(TORCHRUN_JSC_RESOLVE_TIMEOUT), and the source address is found with a UDP ``connect`` (no
packet is sent) towards the best address by ``addresses.candidates`` (loopback skipped, IPv4
first), never simply the resolver's first.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import ipaddress
import socket
import threading
from typing import Dict, List, Optional, Tuple

from .addresses import DEFAULT_RESOLVE_TIMEOUT_S, candidates
from .decide import Endpoint, LaunchError, NetFacts


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


def interface_addresses() -> Dict[str, str]:
    """Every IPv4/IPv6 address on this machine (secondary ones too) -> its interface name.

    Uses getifaddrs(3) through ctypes, so it needs neither psutil nor iproute2 in the image.
    """
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    head = ctypes.POINTER(_IfAddrs)()
    if libc.getifaddrs(ctypes.byref(head)) != 0:
        return {}
    out: Dict[str, str] = {}
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


def resolve(ep: Endpoint, timeout: float = DEFAULT_RESOLVE_TIMEOUT_S) -> Tuple[str, ...]:
    """Addresses of the endpoint host, in resolver order; LaunchError if none within timeout."""
    result: List = []

    def work() -> None:
        try:
            result.append(socket.getaddrinfo(ep.host, ep.port, type=socket.SOCK_STREAM))
        except (OSError, UnicodeError) as e:
            result.append(e)

    t = threading.Thread(target=work, daemon=True)
    t.start()
    t.join(timeout)
    if not result:
        raise LaunchError(f"--rdzv_endpoint: resolving {ep.host!r} took longer than "
                          f"{timeout} s (check DNS or /etc/hosts)")
    if isinstance(result[0], Exception):
        cause = getattr(result[0], "strerror", None) or str(result[0])
        raise LaunchError(f"--rdzv_endpoint: host {ep.host!r} does not resolve: {cause}")
    seen: Dict[str, None] = {}
    for family, _, _, _, sockaddr in result[0]:
        if family in (socket.AF_INET, socket.AF_INET6):
            seen.setdefault(str(ipaddress.ip_address(sockaddr[0].split("%")[0])), None)
    if not seen:
        raise LaunchError(f"--rdzv_endpoint: host {ep.host!r} has no IPv4/IPv6 address")
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


def probe(ep: Endpoint, family: str = "auto",
          timeout: float = DEFAULT_RESOLVE_TIMEOUT_S) -> NetFacts:
    """Resolve the endpoint, match its addresses against ours, find the source address."""
    addresses = resolve(ep, timeout)
    chosen = candidates(ep.host, addresses, family)
    local = interface_addresses()
    matches = tuple(a for a in addresses if a in local)
    for a in chosen:
        src = source_address(a, ep.port)
        if src is not None:
            return NetFacts(addresses, matches, src, local.get(src), family, a)
    return NetFacts(addresses, matches, None, None, family)
