"""Bench section "kit" (issue 27): the jobscript that calls the kit's node-side code by path
against the one that carried it as text, sbatch -> first all_reduce, in the same run.

"Before" is the jobscript the composer of BEFORE (the last commit whose jobscripts embedded
the kit's code, 600-1000 lines) renders from the same spec: that commit's launcher/ is
extracted with `git archive` into build/bench-before/ and run with the same Python. Both
start torchrun_jsc in image.sif (which holds the kit too: the old script needs it there).
Interleaved, 2 nodes x 2 processes, modes torchrun and srun.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Dict

from bench.cluster_bench import ROOT, launch_s, render
from bench.stats import interleave, ratio, table

BEFORE = "766e36d"
OUT = ROOT / "bench-results" / "jobs"


def before_tree() -> Path:
    tree = ROOT / "build" / "bench-before" / BEFORE
    if not (tree / "launcher").is_dir():
        tree.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "archive", BEFORE, "launcher"], cwd=ROOT,
                                 capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return tree


def render_before(name: str, mode: str) -> str:
    """The jobscript BEFORE's composer renders from the spec render() wrote for ``name``."""
    spec = OUT / f"{name}.yaml"
    job = OUT / f"{name}_before.job"
    # That commit's launcher first on sys.path (not -m: the current directory, this checkout,
    # would come first), run from the repository root as `make jobs` runs.
    run = ("import runpy, sys; sys.path.insert(0, sys.argv.pop(1)); "
           "runpy.run_module('launcher', run_name='__main__', alter_sys=True)")
    subprocess.run([sys.executable, "-c", run, str(before_tree()), "render",
                    str(spec.relative_to(ROOT)), "-o", str(job.relative_to(ROOT))],
                   cwd=ROOT, check=True, capture_output=True)
    assert "stacks_hook_py=" in job.read_text(), f"{job}: not {BEFORE}'s jobscript"
    return str(job.relative_to(ROOT))


def kit(repeats: int) -> str:
    jobs: Dict[str, str] = {}
    lines: Dict[str, int] = {}
    for mode in ("torchrun", "srun"):
        now = render(f"bench_kit_{mode}", mode, "apptainer")
        before = render_before(f"bench_kit_{mode}", mode)
        jobs[f"{mode}, apptainer: code as text ({BEFORE})"] = before
        jobs[f"{mode}, apptainer: from $kit"] = now
        for key in (before, now):
            lines[key] = len((ROOT / key).read_text().splitlines())
    s = interleave({k: (lambda j=j: launch_s(j)) for k, j in jobs.items()}, repeats)
    rows = []
    for mode in ("torchrun", "srun"):
        before_key = f"{mode}, apptainer: code as text ({BEFORE})"
        now_key = f"{mode}, apptainer: from $kit"
        rows.append([before_key, str(lines[jobs[before_key]]), s[before_key].cell("s"), "1.00x"])
        rows.append([now_key, str(lines[jobs[now_key]]), s[now_key].cell("s"),
                     ratio(s[now_key], s[before_key])])
    return table(["2 nodes x 2 procs, sbatch -> first all_reduce", "jobscript lines", "time",
                  "vs before"], rows)
