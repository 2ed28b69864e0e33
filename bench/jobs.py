"""The bench's jobscripts: each spec written to bench-results/jobs/NAME.yaml, next to the job
the composer renders from it, as a user's spec would be."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from launcher.render.jobscript import render_jobscript
from launcher.spec import parse_spec

ROOT = Path(__file__).resolve().parent.parent
JOBS = ROOT / "bench-results" / "jobs"


def compose(name: str, spec: str, out: Optional[Path] = None) -> str:
    """Write ``spec`` to OUT/NAME.yaml (OUT: bench-results/jobs) and return the composer's
    jobscript for it."""
    out = JOBS if out is None else out
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.yaml").write_text(spec)
    return render_jobscript(parse_spec(spec, f"bench-results/jobs/{name}.yaml"))
