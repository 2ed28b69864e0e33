"""Steps the ring-3 tests (tests/lab) share: an image built with the project's own make
target, how soon a job ended after one of its ranks died, a job's fields, the start of a
requeued job held by Slurm, and a job log without torch's banners for a failed assertion."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path
from typing import Any, Dict

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


def job_fields(job_id: str) -> Dict[str, str]:
    """``scontrol show job -o``'s KEY=VALUE fields of a job ({} once Slurm forgot it)."""
    p = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True,
                       text=True, timeout=60, check=False)
    return dict(t.split("=", 1) for t in p.stdout.split() if "=" in t)


def release_requeue_hold(job_id: str, fields: Dict[str, str], held: Dict[str, float]) -> None:
    """Start a requeued job that waits out Slurm's credential hold (PENDING, Reason BeginTime:
    about 121 s) 2 s into the hold, not in the second of the requeue: slurmd revoked the old
    credential then, and a start within that second fails ("Job credential revoked", lab job
    153). ``held``: the caller's record of when each attempt was first seen held."""
    if fields.get("JobState") == "PENDING" and fields.get("Reason") == "BeginTime":
        since = held.setdefault(fields.get("Restarts", "0"), time.monotonic())
        if time.monotonic() - since > 2:
            subprocess.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"],
                           capture_output=True, text=True, timeout=60, check=False)


# torch's own chatter that says nothing about the kit: glog lines (W1128 21:39:07.68 PID
# file:line]), c10d's socket warnings ([W1128 ... socket.cpp:207]) and the OMP banner.
_NOISE = re.compile(r"^(?:[WI]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ |\[[WI]\d{4} .*\] |\*{20,}$)")


def story(text: str) -> str:
    """A job log as a failed assertion shows it: the kit's, Slurm's and the program's lines,
    without torch's banners and warnings (so that the whole of a node-loss job fits into CI's
    excerpt of the failure; the lines left out are counted)."""
    kept = [line for line in text.splitlines() if not _NOISE.match(line.strip())]
    dropped = len(text.splitlines()) - len(kept)
    return "\n".join(kept + [f"({dropped} lines of torch's warnings left out)"] if dropped
                      else kept)
