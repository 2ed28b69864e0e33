"""The first node's inter-node name, the rendezvous host: first node + the site's suffix,
fixed (``site.hostname_suffix``) or chosen on the first node when the job starts, by the
profile's rule (model.SuffixRule; ``site: jsc``: the suffix listed for ``$SYSTEMNAME``, else
the first candidate whose name resolves there), or, where the site gives no name
(model.FastInterface; ``generic``), the first node's fast interface's address where its name
resolves to another network (launcher/node/net/fast.py).

Where it sits: spec (model.Site) -> **internode** -> jobscript (rendezvous_lines, batch
scope), modes (deepspeed's hostfile, Ray's --suffix) and preview, which all take the suffix
from here. Pure: shell text and preview lines; the lookup (``getent hosts``) runs in the
job, never here. Values reach the text through launcher.shell's quoting.
"""

from __future__ import annotations

import re
from typing import List, Optional, Tuple

from launcher.model import FastInterface, Site, SuffixRule
from launcher.shell import Assign, Raw, Statement, Token, Var, quote, word

SUFFIX = Var("host_suffix")  # batch scope: the suffix the rule picked
_SYSTEM = re.compile(r"[A-Za-z0-9_.-]+\Z")

# host_suffix = the first SUFFIX with which NODE's name resolves (glibc's resolver, which
# torch and the kit's net rule use too); otherwise one line naming every name tried, status 1.
# Outside the job's nodes (no SLURMD_NODENAME: salloc's shell on a login node, where the
# doctor runs inside an allocation) the names may resolve only on the nodes: there the first
# SUFFIX is taken, and one line says that it could not be checked.


def suffix_token(site: Site) -> Token:
    """What follows the node name in an inter-node name: the fixed suffix, $host_suffix (set
    by suffix_lines at batch scope), or none (FastInterface: the nodes keep their names)."""
    rule = site.hostname_suffix
    if isinstance(rule, FastInterface):
        return ""
    return SUFFIX if isinstance(rule, SuffixRule) else rule


def host_lines(site: Site) -> List[Statement]:
    """Batch scope, after $first_node: set $rdzv_host, the first node's inter-node name."""
    if isinstance(site.hostname_suffix, FastInterface):
        args = " " + quote(site.socket_ifname) if site.socket_ifname else ""
        return [Raw(f"# Site profile {site.profile}: the first node's name, or its fast "
                    "interface's address where the name is on another network."),
                Raw(f'jsc_endpoint "$first_node"{args}')]
    return [*suffix_lines(site),
            Assign("rdzv_host", word(Var("first_node"), suffix_token(site)))]


def _words(rule: SuffixRule) -> Tuple[List[Tuple[str, str]], str]:
    """(case patterns and their arrays, the array for any other SYSTEMNAME), quoted."""
    def array(suffixes: Tuple[str, ...]) -> str:
        return "host_suffixes=(" + " ".join(quote(s) for s in suffixes) + ")"
    rows = []
    for systems, suffix in rule.groups:
        for name in systems:
            if not _SYSTEM.match(name):
                raise ValueError(f"site rule: not a SYSTEMNAME: {name!r}")
        rows.append(("|".join(quote(n) for n in systems), array((suffix,))))
    return rows, array(rule.candidates)


def suffix_lines(site: Site) -> List[Statement]:
    """Batch scope, after $first_node: set $host_suffix by the site's rule, or stop the job
    in one line. Nothing for a fixed suffix."""
    rule = site.hostname_suffix
    if not isinstance(rule, SuffixRule):
        return []
    rows, other = _words(rule)
    case = ['case "${SYSTEMNAME:-}" in'] + [f"    {p}) {a} ;;" for p, a in rows] + \
        [f"    *) {other} ;;", "esac"]
    return [Raw(f"# Site profile {site.profile}: the suffix listed for $SYSTEMNAME, else the "
                "first candidate that resolves."),
            Raw("\n".join(case)),
            Raw('jsc_pick_host_suffix "$first_node" "${host_suffixes[@]}" || exit 1')]


def preview_endpoint(site: Site, first: str, port: int, job_id: int,
                     system: Optional[str]) -> Tuple[Optional[str], List[str]]:
    """(the rendezvous host for the node lines, or None where only the job can tell; the
    preview's endpoint lines). ``system``: the SYSTEMNAME to show (None: every system's)."""
    rule = site.hostname_suffix
    if isinstance(rule, FastInterface):
        fast = f"site.socket_ifname {site.socket_ifname}" if site.socket_ifname else \
            "InfiniBand (IPoIB) or Slingshot hsn*"
        return None, [
            f"# rendezvous endpoint ${{rdzv_host}}:{port}, rdzv_id {job_id}: chosen on the "
            f"first node when the job starts (site profile {site.profile}):",
            f"#   {first}:{port} where {first} resolves to an address on its fast interface "
            f"({fast}) or it has none;",
            "#   else that interface's address (the job says which in one line; "
            "site.hostname_suffix fixes the name)"]
    if not isinstance(rule, SuffixRule):
        host = first + rule
        return host, [f"# rendezvous endpoint {host}:{port} (first node + site suffix "
                      f"{rule!r}), rdzv_id {job_id}"]
    listed = dict(rule.systems)
    if system in listed:
        host = first + listed[system]
        return host, [f"# rendezvous endpoint {host}:{port} (first node + {listed[system]!r} "
                      f"for SYSTEMNAME {system}, site profile {site.profile}), rdzv_id {job_id}"]
    names = ", ".join(first + s for s in rule.candidates)
    others = f"SYSTEMNAME {system} (not listed)" if system else "SYSTEMNAME unset or another"
    return None, [
        f"# rendezvous endpoint ${{rdzv_host}}:{port}, rdzv_id {job_id}: the first node's "
        f"inter-node name, chosen when the job starts (site profile {site.profile}):",
        *(f"#   SYSTEMNAME {', '.join(systems)}: {first}{suffix}:{port}"
          for systems, suffix in rule.groups),
        f"#   {others}: the first of {names} that resolves there",
        "#   (none resolves: the job stops before launching, in one line naming them; "
        "--system NAME previews one system)"]


__all__ = ["SUFFIX", "host_lines", "preview_endpoint", "suffix_lines", "suffix_token"]
