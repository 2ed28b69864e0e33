"""Bench section "scale" (issue 36): time to the first step, per phase, at N nodes x 1 process
on the lab (scripts/cluster.sh up N), and the CPU it costs per node and centrally.

Variants, interleaved round after round at each size, every job a real Slurm job:
- plain srun + env:// (the floor): a hand-written jobscript, one srun task per node
  exporting RANK/WORLD_SIZE/MASTER_ADDR=first node's `i` name and GLOO_SOCKET_IFNAME, bare
  (the project venv);
- plain torchrun, bare: hand-written as a user fixes it for this network (one srun task per
  node, c10d at the first node's `i` name, --rdzv-conf=is_host, --local-addr, GLOO_SOCKET_IFNAME);
- the kit's torchrun mode in Apptainer and its srun mode in Apptainer (rendered by the
  composer from a spec, as users get them); with --scale-variants also the kit's torchrun mode
  bare (kit-torchrun-bare: the kit's own cost against plain torchrun, without Apptainer's).
A variant whose torch processes do not fit this machine's free memory at that size is left
out and the row says so (per node: one torch process for the srun variants, the agent and its
worker for torchrun; sizes from docs/development/cluster.md, "Many nodes").

Wall time per phase, from the last node or rank to get there (bench/programs/ready.py --phases
and lines the bench adds to each jobscript): sbatch -> the batch script starts (queue); the
batch script up to its srun (the kit's central work); srun -> the program's first line on
every node (fan-out, runtime, the kit's task code; in torchrun mode also the agents' torch
import and c10d rendezvous); -> torch imported; -> init_process_group done; -> the first
all_reduce.

CPU seconds per node: each node's slurmd (so its steps and everything they start) is put in a
cpuacct cgroup of its own for the section, and slurmctld in one more; the 2 cores are shared,
so wall time grows with N here while CPU per node shows what a real node would spend. The
typical node is the median of nodes 2..N; "node 1 extra" is what node 1 (the batch host and
the store host) spends beyond it; the batch script's own CPU (shell and waited children up to
srun) and the srun client's (its children's CPU from srun to the end) come from bash's `times`.
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from bench.stats import Series, table
from bench.jobs import compose

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts" / "cluster"))
import slurmjob  # noqa: E402

OUT = ROOT / "bench-results" / "jobs"
PROGRAM = "bench/programs/ready.py --phases"
STATE = Path(os.environ.get("JWB_CLUSTER_STATE", "/run/torchrun-jsc-cluster"))
CPUACCT = Path("/sys/fs/cgroup/cpuacct")
GROUP = "torchrun-jsc-bench"
# Memory per node while the first step runs, MiB (measured here, docs/development/cluster.md):
# a bare torch process (venv) ~150 (private; the libraries are shared by all), one in Apptainer
# ~225 (each container mounts its own squashfs, so nothing is shared), torchrun's agent and its
# worker in one container ~370.
MIB_PER_NODE = {"floor": 150, "torchrun": 300, "kit-torchrun": 370, "kit-srun": 225,
                "kit-torchrun-bare": 300}
RESERVE_MIB = 3072
LABELS = {"floor": "plain srun + env:// (floor), bare",
          "torchrun": "plain torchrun (is_host, --local-addr), bare",
          "kit-torchrun": "kit torchrun mode, apptainer",
          "kit-srun": "kit srun mode, apptainer",
          "kit-torchrun-bare": "kit torchrun mode, bare (the venv)"}
PHASES = ["queue", "batch script", "srun -> program", "torch import", "process group",
          "first all_reduce"]

PLAIN_HEAD = """#!/bin/bash
#SBATCH --job-name={name}
#SBATCH --nodes={n}
#SBATCH --ntasks-per-node=1
#SBATCH --exclusive
#SBATCH --partition=batch
#SBATCH --time=00:10:00
#SBATCH --output=bench-results/jobs/%x-%j.out
set -euo pipefail
echo "BENCH batch_start=$(date +%s.%N)"
first=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
export MASTER_ADDR="${{first}}i" MASTER_PORT=29500
echo "BENCH srun=$(date +%s.%N)"; times
"""
PLAIN_LAUNCH = {
    "floor": """srun --kill-on-bad-exit=1 --cpus-per-task="$SLURM_CPUS_ON_NODE" bash -c \\
    'export RANK=$SLURM_PROCID WORLD_SIZE=$SLURM_NTASKS LOCAL_RANK=$SLURM_LOCALID GLOO_SOCKET_IFNAME=$(hostname)i
     exec .venv/bin/python -u {program}'
""",
    "torchrun": """srun --kill-on-bad-exit=1 --cpus-per-task="$SLURM_CPUS_ON_NODE" bash -c \\
    'export GLOO_SOCKET_IFNAME=$(hostname)i
     exec .venv/bin/torchrun --nnodes=$SLURM_JOB_NUM_NODES --nproc_per_node=1 --rdzv_backend=c10d \\
         --rdzv_endpoint=$MASTER_ADDR:$MASTER_PORT --rdzv_id=$SLURM_JOB_ID \\
         --rdzv-conf=is_host=$([ "$SLURM_NODEID" = 0 ] && echo 1 || echo 0) \\
         --local-addr=$(hostname)i --max_restarts=0 {program}'
""",
}


def plain_job(kind: str, n: int) -> str:
    name = f"bench_scale_{kind}_{n}"
    text = PLAIN_HEAD.format(name=name, n=n) + PLAIN_LAUNCH[kind].format(program=PROGRAM) + "times\n"
    path = OUT / f"{name}.job"
    path.write_text(text)
    return str(path.relative_to(ROOT))


def kit_job(mode: str, n: int, runtime: str = "apptainer") -> str:
    """The composer's jobscript for N nodes x 1 process in image.sif, with the bench's lines:
    the batch start, the time and `times` before the launch's srun, `times` at the end."""
    name = f"bench_scale_kit_{mode}_{runtime}_{n}"
    rt = "runtime: {kind: apptainer, image: image.sif}" if runtime == "apptainer" else \
        "runtime: {kind: bare}"
    site = "site: jsc" if runtime == "apptainer" else "site: {profile: jsc, venv: .venv}"
    spec = (f"job: {{name: {name}, nodes: {n}, time: '00:10:00', partition: batch}}\n"
            f"{site}\n{rt}\n"
            f"launch: {{mode: {mode}, procs_per_node: 1}}\n"
            f"program: [python3, -u, {', '.join(PROGRAM.split())}]\n")
    text = compose(name, spec, OUT)
    head, sep, rest = text.partition("set -euo pipefail\n")
    assert sep, "no 'set -euo pipefail' in the rendered jobscript"
    text = head + sep + 'echo "BENCH batch_start=$(date +%s.%N)"\n' + rest
    launch = text.index("\nsrun --kill-on-bad-exit=1 ")
    text = text[:launch] + '\necho "BENCH srun=$(date +%s.%N)"; times' + text[launch:]
    end = text.rindex('\nexit "$launch_rc"')
    text = text[:end] + "\ntimes" + text[end:]
    path = OUT / f"{name}.job"
    path.write_text(text)
    return str(path.relative_to(ROOT))


# --- cpuacct cgroups: one per node's slurmd, one for slurmctld ---------------------------------

def _pid(name: str) -> Optional[str]:
    path = STATE / f"{name}.pid"
    return path.read_text().strip() if path.exists() else None


def attach(nodes: Sequence[str]) -> bool:
    """Put each node's slurmd (and slurmctld as "ctl") in a cpuacct cgroup of its own."""
    if not (CPUACCT / "cgroup.procs").exists():
        return False
    for name, pid in [("ctl", _pid("slurmctld"))] + [(n, _pid(f"slurmd-{n}")) for n in nodes]:
        if not pid:
            return False
        group = CPUACCT / GROUP / name
        group.mkdir(parents=True, exist_ok=True)
        (group / "cgroup.procs").write_text(pid)
    return True


def detach() -> None:
    """Every process of our groups back to the root group, the groups removed."""
    base = CPUACCT / GROUP
    if not base.exists():
        return
    for group in base.iterdir():
        if group.is_dir():
            for pid in (group / "cgroup.procs").read_text().split():
                try:
                    (CPUACCT / "cgroup.procs").write_text(pid)
                except OSError:  # exited meanwhile
                    pass
            group.rmdir()
    base.rmdir()


def cpu_now() -> Dict[str, float]:
    base = CPUACCT / GROUP
    if not base.exists():
        return {}
    return {g.name: int((g / "cpuacct.usage").read_text()) / 1e9
            for g in base.iterdir() if g.is_dir()}


# --- one job -----------------------------------------------------------------------------------

def _times(text: str) -> List[float]:
    """bash `times` output lines (XmY.YYYs XmY.YYYs) -> [shell user+sys, children user+sys]
    per call, in order."""
    out = []
    for m in re.finditer(r"^(\d+)m([\d.]+)s (\d+)m([\d.]+)s$", text, re.M):
        out.append(int(m.group(1)) * 60 + float(m.group(2)) + int(m.group(3)) * 60 +
                   float(m.group(4)))
    return out


def run_job(jobfile: str, n: int) -> Optional[Dict[str, float]]:
    before = cpu_now()
    submit = time.time()
    job_id = slurmjob.submit(jobfile, cwd=str(ROOT))
    slurmjob.wait_gone(job_id, 900)
    after = cpu_now()
    info = slurmjob.job_info(job_id)
    out = slurmjob.collect_output(job_id, info, str(ROOT))
    ranks = [dict(kv.split("=", 1) for kv in line.split()[1:])
             for line in out.splitlines() if line.startswith("PHASES ")]
    batch = re.search(r"BENCH batch_start=([\d.]+)", out)
    srun = re.search(r"BENCH srun=([\d.]+)", out)
    times = _times(out)
    if len(ranks) != n or not batch or not srun or len(times) < 4:
        print(f"bench: {jobfile} (job {job_id}, {info.get('JobState')}): {len(ranks)} of {n} "
              f"ranks reported\n{out[-3000:]}", file=sys.stderr)
        return None
    last = {k: max(float(r[k]) for r in ranks) for k in ("start", "imported", "pg", "ready")}
    b, s = float(batch.group(1)), float(srun.group(1))
    res = {"total": last["ready"] - submit, "queue": b - submit, "batch script": s - b,
           "srun -> program": last["start"] - s, "torch import": last["imported"] - last["start"],
           "process group": last["pg"] - last["imported"],
           "first all_reduce": last["ready"] - last["pg"],
           "program cpu": statistics.median(float(r["cpu"]) for r in ranks),
           # times: [shell, children] before srun, then [shell, children] at the end
           "batch cpu": times[0] + times[1], "srun cpu": times[3] - times[1]}
    if before and after:
        delta = {k: after[k] - before.get(k, 0.0) for k in after}
        nodes = sorted(k for k in delta if k.startswith("jwb"))[:n]
        typical = statistics.median(delta[k] for k in nodes[1:]) if n > 1 else 0.0
        res.update({"node cpu": typical, "node 1 extra": delta[nodes[0]] - typical,
                    "slurmctld cpu": delta.get("ctl", 0.0)})
    return res


def fits(kind: str, n: int) -> bool:
    avail = 0
    for line in open("/proc/meminfo"):
        if line.startswith("MemAvailable:"):
            avail = int(line.split()[1]) // 1024
    return n * MIB_PER_NODE[kind] <= avail - RESERVE_MIB


def resize(n: int) -> None:
    p = subprocess.run(["bash", str(ROOT / "scripts/cluster.sh"), "up", str(n)],
                       capture_output=True, text=True, timeout=900, check=False)
    if p.returncode != 0:
        raise RuntimeError(f"scripts/cluster.sh up {n} failed: {p.stdout}{p.stderr}")


def lab_size() -> int:
    path = STATE / "nodes"
    return int(path.read_text()) if path.exists() else 2


VARIANTS = ("floor", "torchrun", "kit-torchrun", "kit-srun")


def one_size(n: int, repeats: int, variants: Sequence[str] = VARIANTS
             ) -> Dict[str, Dict[str, Series]]:
    OUT.mkdir(parents=True, exist_ok=True)
    make = {"floor": lambda: plain_job("floor", n), "torchrun": lambda: plain_job("torchrun", n),
            "kit-torchrun": lambda: kit_job("torchrun", n),
            "kit-srun": lambda: kit_job("srun", n),
            "kit-torchrun-bare": lambda: kit_job("torchrun", n, "bare")}
    jobs = {k: make[k]() for k in variants}
    results: Dict[str, Dict[str, Series]] = {k: {} for k in jobs}
    skipped = {k for k in jobs if not fits(k, n)}
    for _ in range(repeats):
        for kind, job in jobs.items():
            if kind in skipped:
                continue
            r = run_job(job, n)
            for key, value in (r or {}).items():
                results[kind].setdefault(key, Series(key, [])).values.append(value)
    for kind in skipped:
        results[kind] = {"skipped": Series(f"does not fit: {n} x ~{MIB_PER_NODE[kind]} MiB", [])}
    return results


def _cell(s: Optional[Series], unit: str = "s", digits: int = 3) -> str:
    if s is None or not s.values:
        return "n/a"
    return f"{s.median:.{digits}g}" + (f" ({min(s.values):.{digits}g}-{max(s.values):.{digits}g})"
                                       if len(s.values) > 1 else "") + (f" {unit}" if unit else "")


def report(sizes: Sequence[int], all_results: Dict[int, Dict[str, Dict[str, Series]]]) -> str:
    wall, cpu = [], []
    for n in sizes:
        res = all_results[n]
        floor = res.get("floor", {}).get("total")
        plain = res.get("torchrun", {}).get("total")
        for kind, r in res.items():
            if "skipped" in r:
                wall.append([str(n), LABELS[kind], r["skipped"].name] + [""] * (len(PHASES) + 2))
                continue
            tot = r.get("total")
            ratio = lambda base: (f"{tot.median / base.median:.2f}x"  # noqa: E731
                                  if tot and tot.values and base and base.values else "n/a")
            wall.append([str(n), LABELS[kind], _cell(tot), ratio(floor), ratio(plain)] +
                        [_cell(r.get(p)) for p in PHASES])
            cpu.append([str(n), LABELS[kind], _cell(r.get("node cpu")),
                        _cell(r.get("program cpu")), _cell(r.get("node 1 extra")),
                        _cell(r.get("batch cpu")), _cell(r.get("srun cpu")),
                        _cell(r.get("slurmctld cpu"))])
    n_runs = max((len(s.values) for res in all_results.values() for r in res.values()
                  for s in r.values()), default=0)
    return (f"Medians (min-max) of up to {n_runs} interleaved runs per size; N nodes x 1 process.\n\n"
            + table(["N", "variant", "sbatch -> first all_reduce", "vs floor",
                     "vs plain torchrun", *PHASES], wall)
            + "\n\nCPU seconds per job (cpuacct per node's slurmd; `times` in the batch script):\n\n"
            + table(["N", "variant", "per node (median of nodes 2..N)", "of which the program",
                     "node 1 extra (batch + store host)", "batch script to srun",
                     "srun client", "slurmctld"], cpu))


def scale(sizes: Sequence[int], repeats: int, variants: Sequence[str] = VARIANTS) -> str:
    found = lab_size()
    all_results: Dict[int, Dict[str, Dict[str, Series]]] = {}
    try:
        for n in sizes:
            print(f"bench: scale: {n} nodes", file=sys.stderr, flush=True)
            resize(max(n, 2))
            nodes = [f"jwb{k:04d}" for k in range(1, max(n, 2) + 1)]
            detach()
            attached = attach(nodes)
            try:
                all_results[n] = one_size(n, repeats, variants)
            finally:
                if attached:
                    detach()
    finally:
        resize(found)
    return report(sizes, all_results)
