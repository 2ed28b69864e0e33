"""Bench sections on the namespace network (tests/helpers/jscnet.py), no Slurm needed.

- scaling: rendezvous time (launcher start -> every rank past init_process_group and a first
  all_reduce) for 2, 4, 8 nodes x 1 process; torchrun_jsc on the JSC-like names vs plain
  torchrun with the hostname endpoint on a shared segment (the baseline that works there).
- container: gloo all_reduce bandwidth of a large tensor, 2 nodes x 1 process,
  torchrun_jsc in apptainer vs bare, same nodes.
"""

from __future__ import annotations

import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, List, Optional, Sequence

from bench.stats import interleave, ratio, seconds_to_ready, table
from tests.helpers import jscnet

ROOT = Path(__file__).resolve().parent.parent
PY = str(Path(sys.executable))
TORCHRUN_JSC = [PY, "-m", "launcher.task.torchrun_jsc"]
TORCHRUN = [str(Path(sys.executable).parent / "torchrun")]
PROGRAM = "bench/programs/ready.py"
TIMEOUT_S = 300


def _argv(launcher: Sequence[str], n: int, endpoint: str, port: int, args: Sequence[str]) -> List[str]:
    return [*launcher, f"--nnodes={n}", "--nproc_per_node=1", "--rdzv_backend=c10d",
            f"--rdzv_endpoint={endpoint}:{port}", "--rdzv_id=bench", "--max_restarts=0",
            PROGRAM, *args]


class Runner:
    def __init__(self, net: jscnet.JscNet):
        self.net = net
        self.port = 29700

    def run(self, launcher: Sequence[str], n: int, endpoint: str, hosts: str,
            args: Sequence[str] = ()) -> Optional[str]:
        """The nodes' joined output, or None (and the tail on stderr) if one failed."""
        self.port += 1
        sub = jscnet.JscNet(self.net.nodes[:n], self.net.hosts_jsc, self.net.hosts_shared)
        results = sub.run_all(_argv(launcher, n, endpoint, self.port, args), hosts,
                              str(ROOT), TIMEOUT_S)
        out = "\n".join(o for _, o in results)
        if any(rc != 0 for rc, _ in results):
            print(f"bench: run failed ({launcher[-1]}, {n} nodes):\n{out[-2000:]}", file=sys.stderr)
            return None
        return out

    def rendezvous_s(self, launcher, n, endpoint, hosts) -> Optional[float]:
        start = time.time()
        return seconds_to_ready(self.run(launcher, n, endpoint, hosts), start, n)

    def bandwidth(self, launcher, mb: int) -> Optional[float]:
        out = self.run(launcher, 2, "tjsc0001i", self.net.hosts_jsc, ("--bw-mb", str(mb)))
        m = re.search(r"BW gbps=([\d.]+)", out or "")
        return float(m.group(1)) if m else None


def scaling(runner: Runner, sizes: Sequence[int], repeats: int) -> str:
    rows = []
    for n in sizes:
        s = interleave({
            "torchrun (hostname endpoint, shared segment)":
                lambda: runner.rendezvous_s(TORCHRUN, n, "tjsc0001", runner.net.hosts_shared),
            "torchrun_jsc (JSC names)":
                lambda: runner.rendezvous_s(TORCHRUN_JSC, n, "tjsc0001i", runner.net.hosts_jsc),
        }, repeats)
        base, jsc = s.values()
        rows.append([str(n), base.cell("s"), jsc.cell("s"), ratio(jsc, base)])
    return table(["nodes x 1 proc", "torchrun, hostname endpoint (baseline)",
                  "torchrun_jsc, `i` endpoint", "ratio"], rows)


def container(runner: Runner, image: Path, mb: int, repeats: int) -> str:
    in_image = ["apptainer", "exec", str(image), "torchrun_jsc"]
    s = interleave({"bare": lambda: runner.bandwidth(TORCHRUN_JSC, mb),
                    "apptainer": lambda: runner.bandwidth(in_image, mb)}, repeats)
    bare, app = s["bare"], s["apptainer"]
    return table(["gloo all_reduce, 2 nodes x 1 proc, " + f"{mb} MiB", "bandwidth",
                  "ratio vs bare"], [["bare torchrun_jsc", bare.cell("Gbit/s"), "1.00x"],
                                     ["torchrun_jsc in apptainer", app.cell("Gbit/s"),
                                      ratio(app, bare)]])


def with_network(n: int, fn: Callable[[Runner], str]) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        net = jscnet.up(tmp, n)
        try:
            return fn(Runner(net))
        finally:
            jscnet.down()
