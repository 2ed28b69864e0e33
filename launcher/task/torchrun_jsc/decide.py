"""The pure part of torchrun_jsc: decide how to patch torchrun's parsed arguments.

Where it sits: torch's parser -> ``Request`` (+ ``NetFacts`` probed by ``netinfo``) ->
``decide()`` -> ``Decision`` -> ``apply()`` on a copy of the namespace -> torch's ``run``.
Nothing here imports torch, reads ``os.environ`` or touches the network: every input is a
value, so the whole decision table is tested without torch (tests/unit/test_torchrun_jsc_decide.py).

Why any of this is needed (pytorch/pytorch#73656): torch's c10d rendezvous decides whether
this node hosts the TCPStore by comparing the endpoint host with the machine's hostname, and
publishes ``--local_addr`` (else the FQDN) of the agent that sorts first as MASTER_ADDR.
On JSC the endpoint is ``jwb0001i`` while the hostname is ``jwb0001``: nobody hosts the
store, or workers get an address they cannot reach.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass, field
from typing import Mapping, Optional, Tuple

from launcher.node.net.addresses import LaunchError, candidates, is_loopback
from launcher.node.net.probe import socket_env

DEFAULT_PORT = 29400  # torch's c10d default port (c10d_rendezvous_backend.DEFAULT_PORT)
MIN_TORCH = (1, 9)  # the first torch with torchrun; the one place this minimum is written
MIN_TORCH_TEXT = "%d.%d" % MIN_TORCH
_TRUE = {"1", "true", "yes", "y", "on"}
_FALSE = {"0", "false", "no", "n", "off"}
_HOST_RE = re.compile(r"^[\w.:%-]+$")


@dataclass(frozen=True)
class Request:
    """What the user asked for, as parsed by torch's own parser (CLI or PET_* variables)."""

    rdzv_backend: str
    rdzv_endpoint: str
    rdzv_conf: str = ""
    local_addr: Optional[str] = None
    standalone: bool = False
    env: Mapping[str, str] = field(default_factory=dict)
    torch_version: Tuple[int, int] = (2, 13)
    # Does the installed torch publish --local_addr (pytorch/pytorch#135262)? Detected from
    # torch itself by compat.supports_local_addr, not from the version string.
    local_addr_supported: bool = True


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


@dataclass(frozen=True)
class NetFacts:
    """What the network says, probed once by ``netinfo.probe`` and passed in as data.

    ``addresses``: what the endpoint host resolves to, resolver order; ``local_matches``:
    those of them that are assigned to one of this machine's interfaces; ``family``: the
    TORCHRUN_JSC_ADDRESS_FAMILY rule (addresses.candidates); ``target``: the best candidate
    that has a route; ``source_addr``/``source_ifname``: the local address (and its interface)
    the kernel would use to reach ``target``.
    """

    addresses: Tuple[str, ...] = ()
    local_matches: Tuple[str, ...] = ()
    source_addr: Optional[str] = None
    source_ifname: Optional[str] = None
    family: str = "auto"
    target: Optional[str] = None

    @property
    def all_loopback(self) -> bool:
        return all(is_loopback(a) for a in self.addresses)


@dataclass(frozen=True)
class Decision:
    patch: bool
    why: str = ""
    is_host: Optional[bool] = None
    is_host_source: str = ""
    node_rank: Optional[int] = None
    node_rank_source: str = ""
    local_addr: Optional[str] = None
    local_addr_source: str = ""
    worker_env: Tuple[Tuple[str, str], ...] = ()
    notes: Tuple[str, ...] = ()
    old_torch_fallback: bool = False


def parse_bool(name: str, value: str) -> bool:
    v = value.strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise LaunchError(f"{name}: expected a boolean (1/0, true/false, yes/no), got {value!r}")


def parse_int(name: str, value: str) -> int:
    try:
        n = int(value.strip())
    except ValueError:
        raise LaunchError(f"{name}: expected a non-negative integer, got {value!r}") from None
    if n < 0:
        raise LaunchError(f"{name}: expected a non-negative integer, got {value!r}")
    return n


def parse_endpoint(endpoint: str) -> Endpoint:
    """Parse ``HOST[:PORT]`` / ``[IPV6][:PORT]`` with torch's rules, but strictly."""
    ep = endpoint.strip()
    if ep.startswith("["):
        host, sep, rest = ep[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            raise LaunchError(f"--rdzv_endpoint: malformed IPv6 endpoint {endpoint!r}; "
                              "accepted: HOST[:PORT] or [IPV6][:PORT]")
        port_text = rest[1:] if rest else None
    elif ep.count(":") > 1:
        raise LaunchError(f"--rdzv_endpoint: IPv6 address without brackets in {endpoint!r}; "
                          "accepted: [IPV6][:PORT]")
    else:
        host, sep, port_text = ep.partition(":")
        port_text = port_text if sep else None
    if not host or not _HOST_RE.match(host):
        raise LaunchError(f"--rdzv_endpoint: bad host in {endpoint!r}; accepted: HOST[:PORT] "
                          "with HOST a hostname or IP address")
    if port_text is None:
        return Endpoint(host, DEFAULT_PORT)
    if not port_text.isdigit() or int(port_text) > 65535:
        raise LaunchError(f"--rdzv_endpoint: bad port {port_text!r} in {endpoint!r}; "
                          "accepted: an integer 0-65535")
    return Endpoint(host, int(port_text))


def parse_rdzv_conf(conf: str) -> dict:
    """Keys of ``--rdzv_conf`` (``k=v,k=v``), same rules as torch's _parse_rendezvous_config."""
    out = {}
    for kv in filter(None, (p.strip() for p in conf.strip().split(","))):
        key, sep, value = kv.partition("=")
        if not key.strip() or not sep or not value.strip():
            raise LaunchError(f"--rdzv_conf: malformed entry {kv!r} in {conf!r}; "
                              "accepted: KEY=VALUE,KEY=VALUE")
        out[key.strip()] = value.strip()
    return out


def passthrough_reason(req: Request) -> Optional[str]:
    """Why torchrun_jsc leaves the arguments exactly as torchrun would, or None to patch."""
    if req.torch_version < MIN_TORCH:
        raise LaunchError(f"torch {req.torch_version[0]}.{req.torch_version[1]} is too old; "
                          f"torchrun_jsc needs torch >= {MIN_TORCH_TEXT} (the first with "
                          "torchrun)")
    if req.standalone:
        return "--standalone"
    if req.rdzv_backend != "c10d":
        return f"rdzv_backend={req.rdzv_backend} (only c10d is patched)"
    if not req.rdzv_endpoint.strip():
        return "no --rdzv_endpoint"
    return None


def _node_rank(env: Mapping[str, str]) -> Tuple[Optional[int], str]:
    for name in ("TORCHRUN_JSC_NODE_RANK", "SLURM_NODEID"):
        if env.get(name, "").strip():
            return parse_int(name, env[name]), name
    return None, ""


def _host_rank(env: Mapping[str, str]) -> int:
    value = env.get("TORCHRUN_JSC_HOST_NODE_RANK", "").strip()
    return parse_int("TORCHRUN_JSC_HOST_NODE_RANK", value) if value else 0


def _decide_is_host(req: Request, ep: Endpoint, net: NetFacts,
                    conf: dict) -> Tuple[Optional[bool], str, Optional[int], str, Tuple[str, ...]]:
    env = req.env
    node_rank, rank_src = _node_rank(env)
    host_rank = _host_rank(env)
    by_rank = None if node_rank is None else node_rank == host_rank
    if "is_host" in conf:
        return parse_bool("--rdzv_conf is_host", conf["is_host"]), "rdzv_conf", node_rank, rank_src, ()
    explicit = any(env.get(v, "").strip() for v in
                   ("TORCHRUN_JSC_NODE_RANK", "TORCHRUN_JSC_HOST_NODE_RANK"))
    if explicit and by_rank is not None:
        return by_rank, f"{rank_src} == TORCHRUN_JSC_HOST_NODE_RANK ({host_rank})", node_rank, rank_src, ()
    if net.addresses and not net.all_loopback:
        is_host, src = _is_host_by_network(ep, net)
        notes: Tuple[str, ...] = ()
        if by_rank is not None and by_rank != is_host:
            notes = (f"{rank_src}={node_rank} with host node rank {host_rank} suggests "
                     f"is_host={by_rank}; the network wins",)
        return is_host, src, node_rank, rank_src, notes
    if by_rank is not None:
        return by_rank, f"{rank_src} == host node rank {host_rank} (network cannot tell)", \
            node_rank, rank_src, ()
    return None, "left to torch (network cannot tell, no node rank)", node_rank, rank_src, ()


def _is_host_by_network(ep: Endpoint, net: NetFacts) -> Tuple[bool, str]:
    """Are the endpoint's addresses (loopback skipped) on this machine? All or none."""
    counted = candidates(ep.host, net.addresses, net.family)
    here = tuple(a for a in counted if a in net.local_matches)
    elsewhere = tuple(a for a in counted if a not in net.local_matches)
    if here and elsewhere:
        raise LaunchError(f"--rdzv_endpoint: host {ep.host!r} resolves to addresses on this "
                          f"machine ({', '.join(here)}) and not on it ({', '.join(elsewhere)}); "
                          "use a name or address of one node only")
    skipped = [a for a in net.addresses if a not in counted]
    extra = f" (ignored: {', '.join(skipped)})" if skipped else ""
    if here:
        verb = "is" if len(here) == 1 else "are"
        return True, f"network: {ep.host} -> {', '.join(here)} {verb} on this machine{extra}"
    return False, f"network: {ep.host} -> {', '.join(counted)} not on this machine{extra}"


def _decide_local_addr(req: Request, net: NetFacts) -> Tuple[Optional[str], str]:
    if req.local_addr:
        return req.local_addr, "--local_addr (user)"
    if net.source_addr is None or not net.addresses or net.all_loopback:
        return None, "left to torch (FQDN)"
    return net.source_addr, (f"source address towards {net.target or 'the endpoint'} via "
                             f"{net.source_ifname or '?'}")


# Before torch 1.11 the TCPStore that rank 0 serves at MASTER_ADDR listens on IPv4 only: in
# the lab, torch 1.9 and 1.10 with MASTER_ADDR=fd77::1 fail in init_process_group with
# "connect() timed out" even on the store's own node (1.11 moved the store to c10d's new
# socket code; 1.13 passes the same test).
IPV6_STORE_TORCH = (1, 11)


def _ipv4_store_only(req: Request, net: NetFacts, local_addr: Optional[str],
                     src: str) -> Tuple[Optional[str], str]:
    """On a torch whose store cannot serve IPv6, an IPv6 address is never published: where
    IPv6 was asked for (TORCHRUN_JSC_ADDRESS_FAMILY=ipv6 or --local_addr) one line says why
    not; otherwise torch picks MASTER_ADDR as torchrun would (its FQDN)."""
    if not local_addr or ":" not in local_addr or req.torch_version >= IPV6_STORE_TORCH:
        return local_addr, src
    version = "%d.%d" % req.torch_version
    if net.family == "ipv6" or req.local_addr:
        raise LaunchError(f"local address {local_addr} is IPv6, but torch {version}'s "
                          "rendezvous store (MASTER_ADDR) listens on IPv4 only (torch < 1.11): "
                          "use an IPv4 endpoint or address (TORCHRUN_JSC_ADDRESS_FAMILY=ipv4)")
    return None, (f"left to torch (FQDN): torch {version}'s store serves IPv4 only, "
                  f"not {local_addr}")


def _worker_env(req: Request, net: NetFacts,
                local_addr: Optional[str]) -> Tuple[Tuple[str, str], ...]:
    """The socket interface for the workers, where the user set none, by the one rule of
    launcher/node/net (``probe.socket_env``: gloo a plain name, NCCL its exact form ``=NAME``, a
    GLOO_SOCKET_IFNAME of yours is NCCL's too). Only when local_addr is the address found
    on that interface."""
    ifname = net.source_ifname
    if not ifname or ifname == "lo" or local_addr != net.source_addr:
        return ()
    return tuple(socket_env(req.env, ifname))


def decide(req: Request, net: NetFacts) -> Decision:
    """The whole patch decision, a pure function of the request and the network facts."""
    reason = passthrough_reason(req)
    if reason:
        return Decision(patch=False, why=reason)
    ep = parse_endpoint(req.rdzv_endpoint)
    conf = parse_rdzv_conf(req.rdzv_conf)
    is_host, host_src, node_rank, rank_src, notes = _decide_is_host(req, ep, net, conf)
    local_addr, addr_src = _decide_local_addr(req, net)
    local_addr, addr_src = _ipv4_store_only(req, net, local_addr, addr_src)
    worker_env = _worker_env(req, net, local_addr)
    old = (not req.local_addr_supported
           or parse_bool("TORCHRUN_JSC_PREFER_OLD_SOLUTION",
                         req.env.get("TORCHRUN_JSC_PREFER_OLD_SOLUTION", "0"))
           or not parse_bool("TORCHRUN_JSC_PREFER_ARG_PATCHING",
                             req.env.get("TORCHRUN_JSC_PREFER_ARG_PATCHING", "1")))
    if req.torch_version >= (3, 0):
        notes += (f"torch {req.torch_version[0]}.{req.torch_version[1]} is newer than tested "
                  "(2.x); running anyway",)
    return Decision(patch=True, why=f"c10d endpoint {ep}", is_host=is_host,
                    is_host_source=host_src, node_rank=node_rank,
                    node_rank_source=rank_src or "none", local_addr=local_addr,
                    local_addr_source=addr_src, worker_env=worker_env, notes=notes,
                    old_torch_fallback=old)


def apply(args: argparse.Namespace, d: Decision) -> argparse.Namespace:
    """A patched copy of torch's parsed arguments; values the user set are never replaced."""
    new = argparse.Namespace(**vars(args))
    if not d.patch:
        return new
    if d.is_host is not None and "is_host" not in parse_rdzv_conf(args.rdzv_conf or ""):
        entry = f"is_host={'true' if d.is_host else 'false'}"
        new.rdzv_conf = f"{args.rdzv_conf},{entry}" if (args.rdzv_conf or "").strip() else entry
    if d.local_addr and not d.old_torch_fallback and getattr(args, "local_addr", None) is None:
        new.local_addr = d.local_addr
    return new


def describe(d: Decision, endpoint: str) -> str:
    """The one start-up line for the job log."""
    if not d.patch:
        return f"torchrun_jsc: running torchrun unchanged ({d.why})"
    parts = [f"endpoint={endpoint}",
             f"node_rank={d.node_rank if d.node_rank is not None else '?'} ({d.node_rank_source})",
             f"is_host={d.is_host} ({d.is_host_source})",
             f"local_addr={d.local_addr} ({d.local_addr_source})"]
    parts += [f"{k}={v} (set for workers)" for k, v in d.worker_env]
    if d.old_torch_fallback:
        parts.append("old-torch fallback (pytorch/pytorch#73656)")
    parts += [f"note: {n}" for n in d.notes]
    return "torchrun_jsc: " + "; ".join(parts)

