"""Bench section `recovery` (job.spare_nodes): from a node killed as hardware dies to the
next training step, broken down, against a fresh start of the same job in the same run.

The job: Apptainer, torchrun mode, examples/ddp_train.py (2 nodes x 2 processes, a
checkpoint and a printed line every step), one spare, torch's elastic logs at INFO (LOGLEVEL).
Its output is read as it grows and every line gets the time it appeared (0.1 s polls). Once
step 10 is printed, the second training node is killed (scripts/cluster.sh kill-node); then:

- detection: kill -> the supervisor's "node ... lost" line (its heartbeat timeout);
- spare start: that line -> the spare's agent up (its torchrun_jsc line: container, torch);
- stop: kill -> the surviving agents stop their workers (torch's rendezvous keep-alive drops
  the dead agent, 3 x 5 s, and the spare waits to join: a membership change);
- rendezvous: stop -> every agent in the new round ("Rendezvous complete"/"joined round");
- restore: rendezvous -> the first step printed after the loss (workers start, init, load
  the checkpoint, one step);
- total: kill -> that step.

A hung node (launch.hang_action replace, one run: each waits for the 121 s deadline): the same
job with launch.hang_timeout 121 whose second training node's ranks sleep at step 10
(ddp_train.py --hang-node --hang-step); from the deadline (the watcher's "no progress for"
line) to the supervisor's "node ... hung" line (every rank's stack collected and printed),
and to the next training step.

Baseline: the same job's fresh start, sbatch -> its first step (what any requeue pays at least,
on top of the queue and Slurm's hold of a requeued job, about 120 s: section requeue).
The job is cancelled after the first step past the loss; the node is revived every time.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from bench.stats import Series, ratio, table
from bench.jobs import compose

ROOT = Path(__file__).resolve().parent.parent
CLUSTER = ["bash", str(ROOT / "scripts" / "cluster.sh")]
OUT = ROOT / "bench-results" / "jobs"
LIMIT_S = 300.0


def _sh(*argv: str) -> str:
    return subprocess.run(argv, capture_output=True, text=True, timeout=120,
                          check=False).stdout


HANG_DEADLINE_S = 121  # launch.hang_timeout: the least for 2 nodes


def render(hang_node: Optional[str] = None) -> Path:
    ckpt = (ROOT / "bench-results" / "recovery-ckpt").relative_to(ROOT)
    launch, program, name = "{mode: torchrun}", "", "recovery_bench"
    if hang_node:  # gloo's own timeout (120 s) would end the waiting ranks first
        launch = f"{{mode: torchrun, hang_timeout: {HANG_DEADLINE_S}, hang_action: replace}}"
        program = f", --timeout, '900', --hang-node, {hang_node}, --hang-step, '10'"
        name = "recovery_hang_bench"
    spec = (
        "job: {name: recovery-bench, nodes: 2, spare_nodes: 1, heartbeat_timeout: 10,"
        " time: '00:10:00',"
        " partition: batch, gpus_per_node: 2, node_output: null}\n"
        f"site: jsc\nruntime: {{kind: apptainer, image: image.sif}}\nlaunch: {launch}\n"
        "program: [python3, -u, examples/ddp_train.py, --steps, '100000', --step-sleep, '0.2',"
        f" --checkpoint-dir, {ckpt}, --checkpoint-every, '1'{program}]\n")
    job = OUT / f"{name}.job"
    job.write_text(compose(name, spec))
    return job


class Tail:
    """The job's output, each line with the time it was first seen, in order."""

    def __init__(self, path: Path) -> None:
        self.path, self.seen = path, 0
        self.lines: List[Tuple[float, str]] = []

    def poll(self) -> None:
        if not self.path.exists():
            return
        with open(self.path, "rb") as f:
            f.seek(self.seen)
            data = f.read()
        end = data.rfind(b"\n") + 1
        self.seen += end
        now = time.time()
        self.lines += [(now, line) for line in data[:end].decode("utf-8", "replace").splitlines()]

    def find(self, pattern: str, after: int = -1) -> Optional[Tuple[int, float, str]]:
        """The first line matching ``pattern`` past line index ``after``: (index, time, line)."""
        rx = re.compile(pattern)
        return next(((i, t, line) for i, (t, line) in enumerate(self.lines)
                     if i > after and rx.search(line)), None)

    def last_between(self, pattern: str, after: int, before: int) -> Optional[float]:
        rx = re.compile(pattern)
        hits = [t for i, (t, line) in enumerate(self.lines)
                if after < i < before and rx.search(line)]
        return hits[-1] if hits else None


def one_run(job: Path) -> Optional[Dict[str, float]]:
    import shutil

    shutil.rmtree(ROOT / "bench-results" / "recovery-ckpt", ignore_errors=True)
    out = OUT / "recovery_bench.out"
    out.unlink(missing_ok=True)
    submitted = time.time()
    job_id = subprocess.run(["sbatch", "--parsable", "-o", str(out), str(job)], cwd=ROOT,
                            capture_output=True, text=True, timeout=60, check=False,
                            env=dict(os.environ, LOGLEVEL="INFO")).stdout.strip()
    if not job_id:
        print("bench: recovery: sbatch failed", file=sys.stderr)
        return None
    tail, victim, killed, kill_at = Tail(out), None, None, -1
    try:
        deadline = time.monotonic() + LIMIT_S
        while time.monotonic() < deadline:
            time.sleep(0.1)
            tail.poll()
            if victim is None and tail.find(r"^step 10 "):
                line = tail.find(r"training on \S+ \S+;")
                if line is None:
                    break
                victim = re.search(r"training on \S+ (\S+);", line[2]).group(1)
                killed, kill_at = time.time(), len(tail.lines) - 1
                subprocess.run([*CLUSTER, "kill-node", victim], capture_output=True,
                               timeout=120, check=False)
            took = tail.find(r" takes the place of ", kill_at) if killed else None
            if took and tail.find(r"^step \d+ ", took[0]):
                break
    finally:
        subprocess.run(["scancel", job_id], check=False, timeout=30)
        if victim:
            subprocess.run([*CLUSTER, "revive-node", victim], capture_output=True,
                           timeout=180, check=False)
    first = tail.find(r"^step \d+ ")
    lost = tail.find(r" lost at ", kill_at)
    took = tail.find(r" takes the place of ", kill_at)
    step = tail.find(r"^step \d+ ", took[0]) if took else None
    if not (killed and first and lost and step):
        print(f"bench: recovery job {job_id}: no recovery seen\n"
              + "\n".join(line for _, line in tail.lines[-40:]), file=sys.stderr)
        return None
    spare = tail.find(r"torchrun_jsc: endpoint=", took[0])
    stop = tail.find(r"closing signal SIGTERM|Stopping worker group|will restart worker group",
                     kill_at)
    rdzv = tail.last_between(r"Rendezvous complete|joined round", (stop or lost)[0], step[0])
    row = {"start": first[1] - submitted, "detection": lost[1] - killed,
           "total": step[1] - killed}
    if spare:
        row["spare"] = spare[1] - lost[1]
    if stop:
        row["stop"] = stop[1] - killed
    if stop and rdzv:
        row["rendezvous"] = rdzv - stop[1]
        row["restore"] = step[1] - rdzv
    print(f"bench: recovery job {job_id}: " + ", ".join(f"{k} {v:.1f} s" for k, v in row.items()),
          file=sys.stderr)
    return row


def hang_run() -> Optional[Dict[str, float]]:
    """One job whose second training node hangs at step 10: deadline -> hung line -> step."""
    import shutil

    nodes = sorted(_sh("sinfo", "-h", "-N", "-p", "batch", "-o", "%N").split())
    if len(nodes) != 3:
        print(f"bench: recovery: a hung node needs 3 nodes in batch, not {nodes}",
              file=sys.stderr)
        return None
    job = render(hang_node=nodes[1])
    shutil.rmtree(ROOT / "bench-results" / "recovery-ckpt", ignore_errors=True)
    out = OUT / "recovery_hang_bench.out"
    out.unlink(missing_ok=True)
    job_id = subprocess.run(["sbatch", "--parsable", "-o", str(out), str(job)], cwd=ROOT,
                            capture_output=True, text=True, timeout=60,
                            check=False).stdout.strip()
    if not job_id:
        print("bench: recovery: sbatch failed", file=sys.stderr)
        return None
    tail = Tail(out)
    try:
        deadline = time.monotonic() + LIMIT_S + HANG_DEADLINE_S
        while time.monotonic() < deadline:
            time.sleep(0.1)
            tail.poll()
            hung = tail.find(r"^job \d+: node \S+ hung at ")
            if hung and tail.find(r"^step \d+ ", hung[0]):
                break
    finally:
        subprocess.run(["scancel", job_id], check=False, timeout=30)
    fired = tail.find(r"no progress for \d+ s \(launch.hang_timeout ")
    hung = tail.find(r"^job \d+: node \S+ hung at ")
    step = tail.find(r"^step \d+ ", hung[0]) if hung else None
    if not (fired and hung and step):
        print(f"bench: recovery hang job {job_id}: no replacement seen\n"
              + "\n".join(line for _, line in tail.lines[-40:]), file=sys.stderr)
        return None
    row = {"stacks": hung[1] - fired[1], "hang_total": step[1] - fired[1]}
    print(f"bench: recovery hang job {job_id}: " + ", ".join(f"{k} {v:.1f} s"
                                                             for k, v in row.items()),
          file=sys.stderr)
    return row


def recovery(repeats: int) -> str:
    job = render()
    runs = [r for r in (one_run(job) for _ in range(repeats)) if r]
    hang = hang_run()

    def cell(key: str) -> str:
        values = [r[key] for r in runs if key in r]
        return Series(key, values).cell("s") if values else "n/a"

    total = ratio(Series("total", [r["total"] for r in runs]),
                  Series("start", [r["start"] for r in runs]))
    rows: List[List[str]] = [
        ["detection: kill -> 'node ... lost' (heartbeat timeout)", cell("detection"), ""],
        ["spare start: lost -> the spare's agent up", cell("spare"), ""],
        ["stop: kill -> surviving agents stop their workers (torch keep-alive)",
         cell("stop"), ""],
        ["rendezvous: stop -> new round complete", cell("rendezvous"), ""],
        ["restore: round -> first step (workers, init, checkpoint)", cell("restore"), ""],
        ["total: kill -> next training step", cell("total"), total],
        ["baseline: fresh start of the same job, sbatch -> first step", cell("start"),
         "1.00x"],
        [f"hung node (hang_action replace, n=1): deadline ({HANG_DEADLINE_S} s) -> "
         "'node ... hung' (every rank's stack)",
         f"{hang['stacks']:.1f} s" if hang else "n/a", ""],
        ["hung node: deadline -> next training step on the spare",
         f"{hang['hang_total']:.1f} s" if hang else "n/a", ""]]
    return table(["2 nodes x 2 procs + 1 spare (apptainer, torchrun), second node killed",
                  "time", "ratio"], rows)
