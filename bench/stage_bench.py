"""Bench section "stage" (issue 36, item 5): runtime.stage's copy of the image to N nodes
(the kit's own jsc_stage: sbcast, then the per-node size check) against N direct reads of the
same file (one srun task per node reading it whole, as a step that starts the image from
shared storage reads it at most), and the removal at the end (jsc_unstage), at N nodes of the
lab (scripts/cluster.sh up N; back to the size it found at the end).

Both read the project's image.sif; one job per size runs the variants interleaved, round after
round. Here the "shared filesystem" is this machine's disk behind its page cache, so a direct
read costs memory bandwidth and the 2 cores, not a parallel filesystem's: what the lab shows is
the broadcast's own cost at N (Slurm's tree, the copies written) and the bytes each way puts on
shared storage (staged: the image once; direct: once per node and step). docs/guide/runtimes.md
("Staging the image to the nodes") says when it pays on a real machine.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Dict, List, Sequence

from bench.scale_bench import lab_size, resize
from bench.stats import Series, table
from launcher import __version__

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts" / "cluster"))
import slurmjob  # noqa: E402

OUT = ROOT / "bench-results" / "jobs"
IMAGE = "image.sif"
JOB = """#!/bin/bash
#SBATCH --job-name=bench-stage
#SBATCH --nodes={n}
#SBATCH --ntasks-per-node=1
#SBATCH --exclusive
#SBATCH --partition=batch
#SBATCH --time=00:30:00
#SBATCH --output=bench-results/jobs/%x-%j.out
set -euo pipefail
kit="$PWD/launcher"
source "$kit/node/job.sh" {version}
nnodes=$SLURM_JOB_NUM_NODES
since() {{ jsc_epoch; awk "BEGIN {{ printf \\"%.3f\\", $jsc_t - $1 }}"; }}
for _ in $(seq {repeats}); do
    jsc_epoch; t0=$jsc_t
    srun --nodes="$nnodes" --ntasks="$nnodes" --ntasks-per-node=1 --cpus-per-task=1 \\
        sh -c 'cat -- "$1" >/dev/null' sh {image}
    echo "BENCH direct=$(since "$t0")"
    jsc_epoch; t0=$jsc_t
    jsc_stage {image} /tmp
    echo "BENCH staged=$(since "$t0")"
    jsc_epoch; t0=$jsc_t
    jsc_unstage
    echo "BENCH unstage=$(since "$t0")"
done
"""


def one_size(n: int, repeats: int) -> Dict[str, Series]:
    OUT.mkdir(parents=True, exist_ok=True)
    job = OUT / f"stage-{n}.job"
    job.write_text(JOB.format(n=n, repeats=repeats, version=__version__, image=IMAGE))
    res = slurmjob.run_job(str(job), timeout=1800, cwd=str(ROOT))
    if res.state != "COMPLETED":
        raise RuntimeError(f"stage bench job at {n} nodes: {res.state}\n{res.output[-3000:]}")
    out: Dict[str, Series] = {}
    for key, value in re.findall(r"BENCH (\w+)=([\d.]+)", res.output):
        out.setdefault(key, Series(key, [])).values.append(float(value))
    return out


def stage(sizes: Sequence[int], repeats: int) -> str:
    found = lab_size()
    size_mb = (ROOT / IMAGE).stat().st_size / 2**20
    rows: List[List[str]] = []
    try:
        for n in sizes:
            print(f"bench: stage: {n} nodes", file=sys.stderr, flush=True)
            resize(max(n, 2))
            r = one_size(n, repeats)
            d, s, u = r["direct"], r["staged"], r["unstage"]
            rows.append([str(n), d.cell("s"), s.cell("s"), f"{s.median / d.median:.2f}x",
                         u.cell("s"), f"{n * size_mb:.0f} MiB", f"{size_mb:.0f} MiB"])
    finally:
        resize(found)
    return (f"{IMAGE} ({size_mb:.0f} MiB); medians of interleaved rounds in one job per size.\n\n"
            + table(["N", "direct: every node reads it", "staged: sbcast + size check",
                     "staged vs direct", "removal at the end",
                     "read from shared storage, direct (per step)", "staged (per job)"], rows))
