"""`jsc-compose doctor SPEC`: run the doctor's script on real nodes, get the reports.

Where it sits: spec -> plan (purpose ``doctor``: the job's own set-up, then the checks of
launcher.features.preflight) -> text -> **submit.doctor** -> launcher.node.doctor.report
(table or JSON).
Inside an allocation (``SLURM_JOB_ID`` set, e.g. under ``salloc``) the script runs here with
bash and its srun uses the allocation; otherwise it is submitted as a short job with the
spec's geometry (sbatch options pass through) and this waits for it, polling squeue.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator, List, Mapping, Optional, Sequence, Tuple

from launcher.node.doctor.report import RESULT_MARK
from launcher.model import SubmitError
from launcher.submit import sbatch

# Gentle on slurmctld, which every user shares: the first looks come quickly (the doctor's
# job itself takes seconds), then the pause doubles up to POLL_MAX_S. Fifteen minutes in the
# queue cost about 95 squeue calls, not the 4,500 of a fixed 0.2 s.
POLL_FIRST_S = 0.2
POLL_MAX_S = 10.0


def poll_delays(first: float = POLL_FIRST_S, cap: float = POLL_MAX_S) -> Iterator[float]:
    """0.2, 0.4, 0.8, ... seconds, then ``cap`` for ever."""
    delay = first
    while True:
        yield delay
        delay = min(delay * 2, cap)


def parse_output(text: str) -> Tuple[List[dict], List[str]]:
    """(the reports, every other line) from the script's output."""
    reports: Optional[List[dict]] = None
    other = []
    for line in text.splitlines():
        if line.startswith(RESULT_MARK):
            reports = json.loads(line[len(RESULT_MARK):])
        else:
            other.append(line)
    if reports is None:
        tail = "; ".join(other[-5:]) or "no output"
        raise SubmitError(f"doctor: the check step printed no reports ({tail})")
    return reports, other


def run_here(script: str, env: Mapping[str, str], timeout: float = 300.0) -> Tuple[List[dict],
                                                                                  List[str]]:
    """Inside an allocation: the script with bash, here (its srun steps use the allocation)."""
    try:
        done = subprocess.run(["bash", "-c", script, "doctor"], capture_output=True, text=True,
                              env=dict(env), timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise SubmitError(f"doctor: the check step did not end within {timeout:.0f} s") from None
    sys.stderr.write(done.stderr)
    return parse_output(done.stdout)


def submit_and_wait(script: str, sbatch_args: Sequence[str], nodelist: Optional[str],
                    wait_s: float = 900.0) -> Tuple[List[dict], List[str]]:
    """Outside an allocation: a short job with the spec's geometry; wait for it, read its log."""
    fd, path = tempfile.mkstemp(prefix=".doctor-", suffix=".job", dir=".")
    log = f"{path[:-4]}-%j.out"
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(script)
    extra = [f"--output={log}", f"--error={log}"]
    if not any(a.startswith(("-t", "--time")) for a in sbatch_args):
        extra.append("--time=5")
    if nodelist:
        extra.append(f"--nodelist={nodelist}")
    try:
        job = sbatch(path, [*extra, *sbatch_args])
    finally:
        Path(path).unlink(missing_ok=True)
    out = Path(log.replace("%j", job))
    try:
        _wait(job, wait_s)
        text = out.read_text(encoding="utf-8", errors="replace") if out.exists() else ""
    finally:
        out.unlink(missing_ok=True)
    return parse_output(text)


def _wait(job: str, wait_s: float) -> None:
    start = time.monotonic()
    end, told = start + wait_s, False
    delays = poll_delays()
    while time.monotonic() < end:
        done = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T %r"], capture_output=True,
                              text=True, check=False)
        state = done.stdout.strip()
        if done.returncode != 0 or not state:
            return
        if state.startswith("PENDING") and not told and time.monotonic() - start > 3:
            print(f"doctor: job {job} waits in the queue ({state.split(' ', 1)[-1]})",
                  file=sys.stderr)
            told = True
        time.sleep(min(next(delays), max(0.0, end - time.monotonic())))
    subprocess.run(["scancel", job], check=False)
    raise SubmitError(f"doctor: job {job} did not end within {wait_s:.0f} s; cancelled")
