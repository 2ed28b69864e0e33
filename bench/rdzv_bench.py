"""Bench section "rendezvous" (issue 36): torch's c10d dynamic rendezvous (what torchrun and
torchrun_jsc run) for N agents, without Slurm and without workers: the store host in a process
of its own (a TCPStore server, as node 0's agent hosts it), the agents as threads of 8
processes (bench/programs/rdzv_agents.py; each with its own handler and store connection, as
one agent per node has), all joining at the same instant (the worst case: a job whose nodes
start together). Reported: the last agent's join time, the store host's CPU seconds, the
agents' CPU seconds for the rendezvous (the torch import excluded), per agent.

Then torch's limit in #144856: the same N agents against a store host whose open-file limit
is below N: how the agents end (RendezvousConnectionError, or the join timeout), and how long
that takes. torchrun_jsc raises the store host's limit or says why it cannot
(launcher/task/torchrun_jsc/store_limits.py).

On 2 cores the agents' threads share the CPU, so join times here are upper bounds; the store
host's CPU is what one real node would spend.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from bench.stats import Series, table

ROOT = Path(__file__).resolve().parent.parent
PROG = str(ROOT / "bench" / "programs" / "rdzv_agents.py")
PROCS = 8


def _cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(n: int, port: int, store_nofile: Optional[int] = None,
        timeout: int = 600) -> Dict[str, object]:
    limit = f"ulimit -n {store_nofile}; " if store_nofile else ""
    store = subprocess.Popen(["bash", "-c", f"{limit}exec {sys.executable} {PROG} store {port}"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        pid = int(store.stdout.readline().split("=")[1])
        cpu0 = _cpu(pid)
        start = time.time() + 10 + n * 0.02  # every process imported torch and connected
        agents, first = [], 0
        for k in range(min(PROCS, n)):
            count = n // PROCS + (1 if k < n % PROCS else 0)
            agents.append(subprocess.Popen(
                [sys.executable, PROG, "agents", str(port), str(n), str(first), str(count),
                 f"{start:.3f}", str(timeout)],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
            first += count
        outs, errors = [], []
        for a in agents:
            out, err = a.communicate(timeout=timeout + 120)
            outs.append(out)
            errors += [line for line in err.splitlines() if "Error" in line][-1:]
        store_cpu = _cpu(pid) - cpu0
    finally:
        store.stdin.close()
        store.wait(30)
    joined = [dict(kv.split("=", 1) for kv in line.split()[1:])
              for out in outs for line in out.splitlines() if line.startswith("JOINED ")]
    cpu = sum(float(next(line.split("cpu=")[1] for line in out.splitlines()
                         if line.startswith("JOINED "))) for out in outs if "JOINED " in out)
    return {"joined": len(joined), "last": max((float(j["t1"]) for j in joined), default=None),
            "start": start, "end": time.time(), "store_cpu": store_cpu,
            "agent_cpu": cpu / max(len(joined), 1), "errors": sorted(set(
                e.split(": ")[0].rsplit(".", 1)[-1] for e in errors))}


def rendezvous(sizes: Sequence[int], repeats: int) -> str:
    rows: List[List[str]] = []
    port = 29810
    for n in sizes:
        join, store, agent = Series("join", []), Series("store", []), Series("agent", [])
        for _ in range(repeats):
            port += 1
            r = run(n, port)
            if r["joined"] == n:
                join.values.append(r["last"] - r["start"])
                store.values.append(r["store_cpu"])
                agent.values.append(r["agent_cpu"] * 1000)
            else:
                print(f"bench: rendezvous of {n}: {r['joined']} joined, {r['errors']}",
                      file=sys.stderr)
        rows.append([str(n), join.cell("s"), store.cell("s"), agent.cell("ms")])
    out = table(["agents", "last join (s after the common start)", "store host CPU",
                 "CPU per agent (rendezvous only)"], rows)
    n = max(sizes)
    lim = max(16, n // 2)
    port += 1
    r = run(n, port, store_nofile=lim, timeout=60)
    out += (f"\n\nStore host limited to {lim} open files (`ulimit -n`), {n} agents, join timeout "
            f"60 s: {r['joined']} of {n} joined; {'the others' if r['joined'] else 'all'} ended with "
            f"{', '.join(r['errors']) or 'nothing'} after {r['end'] - r['start']:.0f} s "
            "(in a job: the kit's join timeout, 600 s + 1 s per node).")
    return out
