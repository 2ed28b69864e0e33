"""Moved to launcher/node/net/addresses.py (the one address rule); kept importable for code that
imports it from here."""

from launcher.node.net.addresses import (DEFAULT_RESOLVE_TIMEOUT_S, FAMILIES, FAMILY_VAR,  # noqa: F401
                                    TIMEOUT_VAR, LaunchError, address_family, candidates,
                                    is_ipv6, is_loopback, resolve_timeout)
