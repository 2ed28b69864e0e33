"""The address rule: which addresses of a rendezvous host count, best first (pure).

Where it sits: ``probe.resolve_host`` -> every address of the host -> ``candidates`` -> the
addresses that count -> ``probe.find_route`` (source address and interface), torchrun_jsc
(decide: is_host) and the doctor. Nothing here touches the network or reads ``os.environ``.

Why: the resolver order must not decide. A Debian/Ubuntu ``/etc/hosts`` maps the node own
hostname to 127.0.1.1 besides the cluster entry, and glibc returns the loopback one first: a
source address computed towards it is 127.0.0.1, which other nodes cannot reach. And a host
with AAAA and A records comes back IPv6 first (RFC 6724 precedence) although the cluster
network the user means is nearly always IPv4.

Node-side code (docs/development/node-code.md): standard library only, Python 3.6.
"""

import ipaddress
import math
from typing import Mapping, Sequence, Tuple

FAMILY_VAR = "TORCHRUN_JSC_ADDRESS_FAMILY"
FAMILIES = ("auto", "ipv4", "ipv6", "any")
TIMEOUT_VAR = "TORCHRUN_JSC_RESOLVE_TIMEOUT"
# glibc resolver retries a lost UDP query after 5 s (resolv.conf "timeout:5"): survive one
# lost packet on the way to each of two attempts. A name that does not exist is answered at
# once (NXDOMAIN, or absent from /etc/hosts), so errors stay fast.
DEFAULT_RESOLVE_TIMEOUT_S = 12.0
ENDPOINT_FLAG = "--rdzv_endpoint"  # what torchrun_jsc messages name; task scripts: MASTER_ADDR


class LaunchError(ValueError):
    """Bad user input: the message is one line naming the value and what is accepted."""


def is_loopback(addr: str) -> bool:
    ip = ipaddress.ip_address(addr.split("%")[0])
    mapped = getattr(ip, "ipv4_mapped", None)
    return ip.is_loopback or bool(mapped and mapped.is_loopback)


def is_ipv6(addr: str) -> bool:
    return ":" in addr


def address_family(env: Mapping[str, str]) -> str:
    """TORCHRUN_JSC_ADDRESS_FAMILY: auto (default: IPv4 unless IPv6 only), ipv4, ipv6, any."""
    value = env.get(FAMILY_VAR, "").strip().lower() or "auto"
    if value not in FAMILIES:
        raise LaunchError("{}: expected one of {}, got {!r}".format(
            FAMILY_VAR, ", ".join(FAMILIES), env[FAMILY_VAR]))
    return value


def resolve_timeout(env: Mapping[str, str]) -> float:
    """TORCHRUN_JSC_RESOLVE_TIMEOUT: seconds (> 0) to wait for the host addresses."""
    text = env.get(TIMEOUT_VAR, "").strip()
    if not text:
        return DEFAULT_RESOLVE_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise LaunchError("{}: expected a number of seconds > 0, got {!r}".format(
            TIMEOUT_VAR, text))
    return value


def candidates(host: str, addresses: Sequence[str], family: str,
               what: str = ENDPOINT_FLAG) -> Tuple[str, ...]:
    """The host addresses that count, best first.

    Loopback ones are skipped whenever another exists; then ``auto`` puts every IPv4 address
    before every IPv6 one, ``ipv4``/``ipv6`` keep only that family and ``any`` keeps the
    resolver order. Raises LaunchError when the family leaves nothing (``what`` names the
    input in the message: the torchrun flag, or MASTER_ADDR).
    """
    usable = tuple(a for a in addresses if not is_loopback(a)) or tuple(addresses)
    v4 = tuple(a for a in usable if not is_ipv6(a))
    v6 = tuple(a for a in usable if is_ipv6(a))
    chosen = {"auto": v4 + v6, "any": usable, "ipv4": v4, "ipv6": v6}[family]
    if not chosen:
        raise LaunchError("{}: host {!r} has no {} address ({}={}); it resolves to {}".format(
            what, host, family.replace("ip", "IP"), FAMILY_VAR, family, ", ".join(addresses)))
    return chosen
