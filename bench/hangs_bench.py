"""Bench section for hangs (docs/guide/hangs.md): what the progress deadline costs a job that
steps, and how long a hang takes to reach the log.

- steps: 2 nodes x 2 processes (torchrun_jsc, venv), N compute-bound steps with an all_reduce
  each (bench/programs/ready.py --work-steps; rank 0 prints `WORK s=`), interleaved:
  without the kit's hook at all (the baseline: the jobscript's export of the hook's directory
  removed and each task's prelude reduced to its `exec`), as rendered (the stack hook, no deadline), and with `launch.hang_timeout` (the
  hook's progress thread and the watcher beside the launch), at the least deadline the spec
  takes for 2 nodes plus a little, so that both look every 13 s, as often as they ever do.
- report: tests/helpers/programs/hang_ranks.py (rank 3 stops in load_batch after the first
  all_reduce, ranks 0-2 wait in the next one) with the same deadline: from the hang (the
  ranks' ready marks, touched where they stay) to the watcher's first line in the log, to
  its last line written (stacks collected, the rank behind named) and to the job gone.
"""

from __future__ import annotations

import re
import shutil
import sys
import time
from pathlib import Path
from typing import Dict, Optional

from bench.cluster_bench import PROGRAM, slurmjob, spec_yaml
from bench.stats import Series, interleave, ratio, table

ROOT = Path(__file__).resolve().parent.parent
DEADLINE_S = 130  # 2 nodes: at least 121 s (the rendezvous read timeout); looks every 13 s


# The stack hook's prelude in the launch line: sh "${kit}/task/hook.sh" (maybe wrapped).
PRELUDE = re.compile(r'sh(?: \\\n *| )"\$\{kit\}/task/hook\.sh"')


def without_hook(text: str) -> str:
    """The rendered jobscript with no rank loading the kit's hook: the prelude every task
    starts through (launcher/task/hook.sh) replaced by an sh that only execs, so that the
    baseline starts its tasks the same way."""
    text, n = PRELUDE.subn("sh -c 'exec \"$@\"' jsc-hook", text)
    assert n == 1, "the hook's prelude moved: update bench/hangs_bench.py"
    return text


def _job(name: str, program, deadline: bool, hook: bool = True, env: str = "") -> str:
    from bench.jobs import compose

    out_dir = ROOT / "bench-results" / "jobs"
    spec = spec_yaml(name, "torchrun", "bare", program)
    if deadline:
        spec = spec.replace("launch: {", f"launch: {{hang_timeout: {DEADLINE_S}, ")
    spec += env
    text = compose(name, spec)
    if not hook:  # the baseline: no rank loads the kit's hook
        text = without_hook(text)
    (out_dir / f"{name}.job").write_text(text)
    return f"bench-results/jobs/{name}.job"


def _work_s(jobfile: str) -> Optional[float]:
    job_id = slurmjob.submit(jobfile, cwd=str(ROOT))
    slurmjob.wait_gone(job_id, 900)
    out = slurmjob.collect_output(job_id, slurmjob.job_info(job_id), str(ROOT))
    m = re.search(r"WORK s=([\d.]+)", out)
    if not m or "no progress" in out:
        print(f"bench: {jobfile}: no WORK line, or ended by the deadline\n{out[-2000:]}",
              file=sys.stderr)
        return None
    return float(m.group(1))


def steps(repeats: int, n: int = 10000) -> str:
    work = [*PROGRAM, "--work-steps", str(n)]
    jobs = {"none": _job("bench_hang_nohook", work, deadline=False, hook=False),
            "hook": _job("bench_hang_hook", work, deadline=False),
            "deadline": _job("bench_hang_deadline", work, deadline=True)}
    s = interleave({k: (lambda j=j: _work_s(j)) for k, j in jobs.items()}, repeats)
    return table([f"{n} compute-bound steps (an all_reduce each), 2 nodes x 2 procs", "time",
                  "vs no hook"],
                 [["no hook (baseline: the jobscript's hook line removed)",
                   s["none"].cell("s"), "1.00x"],
                  ["as rendered: the stack hook (faulthandler on SIGURG)", s["hook"].cell("s"),
                   ratio(s["hook"], s["none"])],
                  [f"launch.hang_timeout: {DEADLINE_S}: + progress thread and watcher",
                   s["deadline"].cell("s"), ratio(s["deadline"], s["none"])]])


def _hang_s(jobfile: str, ready: Path) -> Optional[Dict[str, float]]:
    shutil.rmtree(ready, ignore_errors=True)
    ready.mkdir(parents=True)
    ready.chmod(0o1777)
    job_id = slurmjob.submit(jobfile, cwd=str(ROOT))
    slurmjob.wait_gone(job_id, 900)
    gone = time.time()
    out = slurmjob.collect_output(job_id, slurmjob.job_info(job_id), str(ROOT))
    fired = re.search(r"no progress for [\d.]+ s \(launch.hang_timeout \d+\) at ([\d.]+)", out)
    verdict = ROOT / ".hangs" / job_id / "no-progress"
    marks = [p.stat().st_mtime for p in ready.iterdir()]
    if not fired or not verdict.exists() or len(marks) != 4:
        print(f"bench: {jobfile}: job {job_id} not ended by the deadline\n{out[-2000:]}",
              file=sys.stderr)
        return None
    hang = max(marks)
    return {"fired": float(fired.group(1)) - hang, "verdict": verdict.stat().st_mtime - hang,
            "gone": gone - hang}


def report(repeats: int) -> str:
    ready = ROOT / "bench-results" / "hang-ready"
    job = _job("bench_hang_report", ["python3", "-u", "tests/helpers/programs/hang_ranks.py"],
               deadline=True, env=f"env: {{set: {{READY_DIR: {ready}}}}}\n")
    runs = [_hang_s(job, ready) for _ in range(repeats)]
    ok = [r for r in runs if r]
    rows = [[f"hang -> watcher fires (deadline {DEADLINE_S} s, looks every "
             f"{DEADLINE_S // 10} s)", Series("f", [r["fired"] for r in ok]).cell("s")],
            ["hang -> stacks and the line naming rank 3 in the log",
             Series("v", [r["verdict"] for r in ok]).cell("s")],
            ["hang -> job gone from the queue (exit 124)",
             Series("g", [r["gone"] for r in ok]).cell("s")]]
    return table(["rank 3 stops after its first all_reduce, 2 nodes x 2 procs", "time"], rows)


def hangs(repeats: int) -> str:
    return steps(repeats) + "\n\n" + report(repeats)
