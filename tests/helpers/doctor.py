"""A node's doctor report as the collector (launcher/node/doctor/report.py) reads it, for the
doctor's ring-1 and ring-2 tests (tests/unit/test_doctor.py, tests/fakes/test_doctor.py)."""

from launcher.node.doctor import node


def report(name, nodeid, addr, **crosses):
    """Every check passed except ``crosses`` (column -> (value, cause))."""
    checks = {c: node.cell(True, "ok") for c in node.COLUMNS if c != "same"}
    checks.update({k: node.cell(False, *v) for k, v in crosses.items()})
    return {"node": name, "nodeid": nodeid, "address": addr, "endpoint": "n1i:29400",
            "seconds": 1.25, "checks": checks}
