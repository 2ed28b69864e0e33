"""`jsc-compose stacks` across the nodes of a job: the one srun step that collects every rank's
stack, and what is left when it times out.

Where it sits: the CLI's edge (launcher.cli ``stacks``) -> **this step** -> the kit's collector
(launcher.node.stacks ``node``) on every node, as launcher.features.hangs renders it for the
jobscript too (``stacks_srun``). It runs srun and squeue; launcher.cli prints what it returns
and turns its SubmitError into one line. A step that runs past the nodes' wait plus
STEP_MARGIN_S is killed, and the JSON lines the nodes printed until then are kept: the ranks of
the nodes that answered are reported, with one line saying what is missing.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any, Mapping, NamedTuple, Optional, Sequence

from launcher import kit
from launcher.features.hangs import seconds_text, stacks_srun
from launcher.model import SubmitError
from launcher.node.stacks import child_output
from launcher.shell import Var, resolve

# How long the srun may run beyond the nodes' own wait (starting the step on every node,
# printing) before it is killed and what the nodes printed so far is reported.
STEP_MARGIN_S = 120


class StacksStep(NamedTuple):
    """`jsc-compose stacks`: what the step across the job's nodes got."""

    text: str  # the JSON lines the nodes printed (those read before a timeout)
    nodes: int
    timed_out_s: Optional[float]  # the limit the step ran into, None when it ended


def run_stacks_step(job: str, wait_s: float) -> StacksStep:
    """One srun --overlap task per node of the job; their JSON lines. A step still running
    STEP_MARGIN_S after the nodes' wait is killed, and what it printed until then kept."""
    nodes = os.environ.get("SLURM_JOB_NUM_NODES") if os.environ.get("SLURM_JOB_ID") == job \
        else None
    if not nodes:
        try:
            nodes = subprocess.run(["squeue", "-h", "-j", job, "-o", "%D"], capture_output=True,
                                   text=True, timeout=60, check=True).stdout.strip()
        except (OSError, subprocess.SubprocessError) as exc:
            raise SubmitError(f"stacks: cannot ask squeue about job {job}: {exc}") from None
    if not nodes.isdigit():
        raise SubmitError(f"stacks: job {job} is not running (squeue: {nodes!r})")
    argv = resolve(stacks_srun(Var("job"), Var("nodes"), str(kit.installed()), wait_s),
                   {"job": job, "nodes": nodes})
    limit = wait_s + STEP_MARGIN_S
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=limit)
    except subprocess.TimeoutExpired as exc:  # srun is killed; its output so far is in exc
        sys.stderr.write(child_output(exc.stderr))
        return StacksStep(child_output(exc.stdout), int(nodes), limit)
    except (OSError, subprocess.SubprocessError) as exc:
        raise SubmitError(f"stacks: srun failed: {exc}") from None
    sys.stderr.write(done.stderr)
    return StacksStep(done.stdout, int(nodes), None)


def timed_out_line(limit_s: float, nodes: int, records: Sequence[Mapping[str, Any]]) -> str:
    """What a timed-out collection got and what is missing, in one line. A node prints its
    ranks all at once when its wait is over, so a node that printed nothing is missing."""
    hosts = sorted({str(r.get("host", "?")) for r in records})
    missing = nodes - len(hosts)
    if not records:
        got = f"no node answered; the ranks of all {_count(nodes, 'node')} are missing"
    else:
        got = (f"{_count(len(records), 'rank')} from {len(hosts)} of {_count(nodes, 'node')} "
               f"({', '.join(hosts)}) above; " +
               (f"the ranks of the other {_count(missing, 'node')} are missing" if missing > 0
                else "the last node's list may be cut short"))
    return f"stacks: the collection timed out after {seconds_text(limit_s)} s: {got}"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


__all__ = ["STEP_MARGIN_S", "StacksStep", "run_stacks_step", "timed_out_line"]
