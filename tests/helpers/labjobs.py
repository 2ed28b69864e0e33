"""Steps the ring-3 tests (tests/lab) share: an image built with the project's own make
target, and how soon a job ended after one of its ranks died."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def make(target: str, timeout: float = 2400) -> None:
    """Build (or find up to date) an image with the project's own target; fail, never skip."""
    p = subprocess.run(["make", target], capture_output=True, text=True, timeout=timeout,
                       cwd=REPO, check=False)
    assert p.returncode == 0, f"make {target} failed:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"


def assert_ended_within(res: Any, pattern: str, what: str, limit_s: float) -> float:
    """The finished job ``res`` (scripts/cluster/slurmjob.py) ended less than ``limit_s``
    after the unix time that ``pattern`` (group 1) finds in its output; prints the lag
    (Slurm's EndTime has 1 s resolution) and returns it."""
    m = re.search(pattern, res.output)
    assert m, res.output
    lag = res.ended_at - float(m.group(1))
    print(f"{what} -> job end: {lag:.1f} s (EndTime has 1 s resolution)")
    assert lag < limit_s, f"job ended {lag:.1f} s after the {what}"
    return lag
