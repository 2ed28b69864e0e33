"""Probe the network once for torchrun_jsc, by the one rule of launcher/node/net/probe.py.

Where it sits: endpoint -> ``probe()`` -> ``NetFacts`` (a value) -> ``decide.decide``.
"""

from __future__ import annotations

from launcher.node.net.addresses import DEFAULT_RESOLVE_TIMEOUT_S
from launcher.node.net.probe import find_route, interface_addresses, resolve_host, \
    source_address  # noqa: F401  (interface_addresses, source_address: kept importable)
from typing import Tuple

from .decide import Endpoint, NetFacts


def resolve(ep: Endpoint, timeout: float = DEFAULT_RESOLVE_TIMEOUT_S) -> Tuple[str, ...]:
    """Addresses of the endpoint host, in resolver order; LaunchError if none within timeout."""
    return resolve_host(ep.host, ep.port, timeout)


def probe(ep: Endpoint, family: str = "auto",
          timeout: float = DEFAULT_RESOLVE_TIMEOUT_S) -> NetFacts:
    """Resolve the endpoint, match its addresses against ours, find the source address."""
    route = find_route(ep.host, ep.port, family, timeout)
    return NetFacts(route.addresses, route.local_matches, route.source, route.ifname, family,
                    route.target)
