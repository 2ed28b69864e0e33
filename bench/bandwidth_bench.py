"""Bench section `bandwidth`: all_reduce bus bandwidth per node pair (issue 20, item 2).

For every pair of the partition's nodes, one 2-node job (one srun task per node, bare: the
project venv) runs examples/allreduce_bw.py with gloo (the lab has no GPU: gloo over the
lab's veth links, `jwb000Ki`); sbatch's --nodelist picks the pair. Pairs are interleaved round
after round. Per pair and size: the median bus bandwidth (nccl-tests' busbw, GB/s = 1e9
bytes/s, read from the program's ALLREDUCE_BW line) with min and max, and the ratio against
the best pair at that size in the same run: a pair well below the others is a slow link (or a
busy node). With --bw-floor GBPS the program gets --floor and the last column counts the runs
it found below the floor (its largest size), by its own line.

On a GPU site the same program runs with NCCL, one process per GPU, against the site's floor:
docs/guide/doctor.md#bandwidth-between-node-pairs.
"""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from bench.stats import Series, ratio, table

ROOT = Path(__file__).resolve().parent.parent
PREFIX = "ALLREDUCE_BW "
BELOW = "is below the floor of"  # the program's --floor line
Pair = Tuple[str, str]


def pairs(nodes: Sequence[str]) -> List[Pair]:
    """Every unordered pair of distinct nodes, sorted."""
    return list(itertools.combinations(sorted(set(nodes)), 2))


def spec_yaml(floor: Optional[float] = None) -> str:
    """The 2-node job: one task per node, the venv, gloo, the program's CPU sizes."""
    program = ["python3", "-u", "examples/allreduce_bw.py", "--backend", "gloo"]
    if floor is not None:
        program += ["--floor", f"{floor:g}"]
    prog = ", ".join(f"'{a}'" for a in program)
    return ("job: {name: bench_bandwidth, nodes: 2, time: '00:10:00', partition: batch, "
            "node_output: null}\n"
            "site:\n  profile: jsc\n  venv: .venv\n"
            "launch: {mode: srun, procs_per_node: 1}\n"
            f"program: [{prog}]\n")


def parse(output: str, pair: Pair) -> Dict[int, float]:
    """busbw (GB/s) by size from the ALLREDUCE_BW lines of a job on ``pair``; a line from
    other hosts, or of another world size, is an error (the job ran where it should not)."""
    out = {}
    for line in output.splitlines():
        idx = line.find(PREFIX)
        if idx < 0:
            continue
        rec = json.JSONDecoder().raw_decode(line[idx + len(PREFIX):])[0]
        if rec["hosts"] != sorted(pair) or rec["world_size"] != 2:
            raise ValueError(f"ALLREDUCE_BW line from hosts {rec['hosts']}, world size "
                             f"{rec['world_size']}: expected {sorted(pair)}, 2")
        out[rec["bytes"]] = rec["busbw_gbps"]
    return out


def run_pair(jobfile: str, pair: Pair) -> Optional[Tuple[Dict[int, float], bool]]:
    """Submit the job on ``pair``: (busbw by size, below the floor), or None (no lines)."""
    from bench.cluster_bench import slurmjob

    job_id = slurmjob.submit(jobfile, ["--nodelist", ",".join(pair)], cwd=str(ROOT))
    slurmjob.wait_gone(job_id, 300)
    out = slurmjob.collect_output(job_id, slurmjob.job_info(job_id), str(ROOT))
    try:
        got = parse(out, pair)
    except ValueError as err:
        got, out = {}, f"{err}\n{out}"
    if not got:
        print(f"bench: bandwidth job {job_id} on {','.join(pair)}: no ALLREDUCE_BW line\n"
              f"{out[-2000:]}", file=sys.stderr)
        return None
    return got, BELOW in out


def human(size: int) -> str:
    """Bytes as the program's sizes are written: 64 KiB, 1 MiB, 1 GiB, 4100 B."""
    for unit, name in ((2 ** 30, "GiB"), (2 ** 20, "MiB"), (2 ** 10, "KiB")):
        if size % unit == 0:
            return f"{size // unit} {name}"
    return f"{size} B"


def rows(series: Dict[Pair, Dict[int, Series]], below: Dict[Pair, int],
         floor: Optional[float]) -> List[List[str]]:
    """One row per pair and size; the ratio against the best pair's median at that size."""
    sizes = sorted({s for by_size in series.values() for s in by_size})
    out = []
    for size in sizes:
        measured = {p: by[size] for p, by in series.items() if size in by and by[size].values}
        best = max(measured.values(), key=lambda s: s.median, default=None)
        for pair, by in series.items():
            s = by.get(size, Series(f"{pair}", []))
            row = [" - ".join(pair), human(size), s.cell("GB/s"),
                   ratio(s, best) if best is not None else "n/a"]
            if floor is not None:
                row.append(f"{below.get(pair, 0)} of {len(s.values)} runs"
                           if size == sizes[-1] else "")
            out.append(row)
    return out


def partition_nodes(partition: str = "batch") -> List[str]:
    """The partition's nodes that can run a job now (not down, drained or failing)."""
    from bench.cluster_bench import slurmjob

    p = slurmjob.run(["sinfo", "-h", "-N", "-p", partition, "-t", "idle,mix,alloc", "-o", "%N"])
    return sorted(set(p.stdout.split()))


def bandwidth(repeats: int, floor: Optional[float] = None) -> str:
    from bench.jobs import compose

    out_dir = ROOT / "bench-results" / "jobs"
    job = out_dir / "bench_bandwidth.job"
    job.write_text(compose("bench_bandwidth", spec_yaml(floor)))
    jobfile = str(job.relative_to(ROOT))
    todo = pairs(partition_nodes())
    if not todo:
        return "fewer than 2 usable nodes in partition batch: no pair to measure"
    series: Dict[Pair, Dict[int, Series]] = {p: {} for p in todo}
    below: Dict[Pair, int] = {p: 0 for p in todo}
    for _ in range(repeats):  # interleaved: drift hits every pair alike
        for pair in todo:
            got = run_pair(jobfile, pair)
            if got is None:
                continue
            for size, busbw in got[0].items():
                series[pair].setdefault(size, Series(f"{pair}", [])).values.append(busbw)
            below[pair] += got[1]
    header = ["node pair", "size", "busbw", "vs best pair"]
    if floor is not None:
        header.append(f"below {floor:g} GB/s (largest size)")
    return table(header, rows(series, below, floor)) + (
        "\n\ngloo over the lab's veth links (all nodes share this machine's cores), one process "
        "per node; busbw = algbw * 2(n-1)/n = algbw for 2 ranks (nccl-tests).")
