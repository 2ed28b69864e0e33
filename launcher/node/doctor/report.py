"""The doctor's reports -> one verdict: the node x check table (or JSON) and the exit status.

Where it sits: launcher.node.doctor.node (one report per node) -> **report** -> the job log
(``launch.preflight``) or the CLI (``python -m launcher doctor``). Run with node.py
through ``python3 -I "$kit/node/run.py" doctor`` (launcher.features.preflight writes the
step); ``main`` is its entry point:
``node CONFIG HOST PORT -- WRAP...`` on each node, ``table|json CONFIG NODES`` to collect.
"""

import json
import os
import sys
import time

from launcher.node.doctor.local import cell
from launcher.node.doctor.node import COLUMNS, MARK, run_node

RESULT_MARK = "torchrun-jsc-doctor-result "  # the collected reports, for the CLI
CELL_WIDTH = 30  # the table cuts longer cells with '...'; the lines below it are complete


def collect(lines, nodes):
    """Reports in node order, with a row for every node that sent none; 'same' filled in."""
    got = {}
    for line in lines:
        if line.startswith(MARK):
            try:
                rep = json.loads(line[len(MARK):])
                got[rep["node"]] = rep
            except (ValueError, KeyError):
                continue
    out = []
    for i, node in enumerate(nodes):
        rep = got.pop(node, None)
        if rep is None:
            missing = cell(False, "no report", "the check did not run on this node or was "
                           "killed (see the job's error log)")
            rep = {"node": node, "nodeid": i, "address": None,
                   "checks": {c: missing if c == "name" else cell(None) for c in COLUMNS}}
        out.append(rep)
    out += [got[k] for k in sorted(got)]  # a node name the list did not have (alias)
    ref = out[0]["address"] if out else None
    for rep in out:
        addr = rep["address"]
        if addr is None or ref is None:
            same = cell(None)
        elif addr == ref:
            same = cell(True, "yes", addr)
        else:
            same = cell(False, addr, "the first node (%s) resolves it to %s"
                        % (out[0]["node"], ref))
        rep["checks"]["same"] = same
    return out


def failures(reports):
    return [(r["node"], c, r["checks"][c]) for r in reports for c in COLUMNS
            if r["checks"].get(c, {}).get("ok") is False]


def warnings(reports):
    """(node, check, text) of the passed checks that carry a warning."""
    return [(r["node"], c, r["checks"][c]["warn"]) for r in reports for c in COLUMNS
            if r["checks"].get(c, {}).get("warn")]


def networks(reports, host):
    """Which network each node would use, grouped: 'HOST -> ADDRESS -> INTERFACE' lines."""
    groups = {}
    for r in reports:
        nic = r["checks"].get("iface", {})
        if nic.get("ok") and r.get("address"):
            groups.setdefault((r["address"], nic["value"]), []).append(r["node"])
    out = []
    for (addr, nic), nodes in groups.items():
        shown = ", ".join(nodes[:3]) + (", ..." if len(nodes) > 3 else "")
        out.append("network: %s -> %s -> %s on %d node%s (%s)" % (
            host, addr, nic, len(nodes), "s" if len(nodes) != 1 else "", shown))
    return out


def _short(c):
    if c["ok"] is None:
        return "-"
    if c["ok"]:
        return c["value"] or "ok"
    text = "X " + c["value"] + (": " + c["cause"] if c["cause"] else "")
    return text if len(text) <= CELL_WIDTH else text[:CELL_WIDTH - 3] + "..."


def render_table(reports, step=None):
    """The table: a row per node, a column per check, crosses with value and cause."""
    rows = [["node"] + list(COLUMNS)]
    rows += [[r["node"]] + [_short(r["checks"][c]) for c in COLUMNS] for r in reports]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    ends = [r["endpoint"] for r in reports if r.get("endpoint")]
    took = max([r.get("seconds", 0) for r in reports] or [0])
    lines = ["doctor: %d node%s, rendezvous %s, checks took %.1f s" % (
        len(reports), "s" if len(reports) != 1 else "", ends[0] if ends else "?", took)]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in rows]
    host = ends[0].rsplit(":", 1)[0] if ends else "?"
    lines += networks(reports, host)
    lines += ["%s %s: warning: %s" % w for w in warnings(reports)]
    bad = failures(reports)
    for node, col, c in bad:
        lines.append("%s %s: %s%s" % (node, col, c["value"], ": " + c["cause"] if c["cause"]
                                      else ""))
    took = "" if step is None else " (step %.1f s)" % step
    lines.append("doctor: all checks passed" + took if not bad else
                 "doctor: %d check%s failed on %d node%s%s" % (
                     len(bad), "s" if len(bad) != 1 else "", len({b[0] for b in bad}),
                     "s" if len({b[0] for b in bad}) != 1 else "", took))
    return "\n".join(lines) + "\n"


def render_json(reports):
    ends = [r["endpoint"] for r in reports if r.get("endpoint")]
    return json.dumps({"rendezvous": ends[0] if ends else None, "ok": not failures(reports),
                       "failures": [{"node": n, "check": c, "value": x["value"],
                                     "cause": x["cause"]} for n, c, x in failures(reports)],
                       "warnings": [{"node": n, "check": c, "text": t}
                                    for n, c, t in warnings(reports)],
                       "nodes": reports}, sort_keys=True) + "\n"


def main(argv):
    """``node CONF HOST PORT -- WRAP...`` | ``table|json CONF HOST PORT NODES [T0]`` (the
    reports on stdin; T0: when the step started, epoch seconds, for its duration)."""
    what, conf, host, port = argv[0], json.loads(argv[1]), argv[2], int(argv[3])
    if what == "node":
        wrap = argv[5:] if argv[4:5] == ["--"] else []
        rep = run_node(conf, host, port, wrap)
        sys.stdout.write(MARK + json.dumps(rep) + "\n")
        sys.stdout.flush()
        os._exit(0)  # a check thread stuck in a hung filesystem must not hold the step
    reports = collect(sys.stdin.read().splitlines(), argv[4].split())
    step = time.time() - float(argv[5]) if len(argv) > 5 and argv[5] else None
    if what == "json":  # for the CLI, which renders the table or --json itself
        sys.stdout.write(RESULT_MARK + json.dumps(reports) + "\n")
    else:
        sys.stdout.write(render_table(reports, step))
    return 1 if failures(reports) else 0
