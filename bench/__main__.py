"""`make bench` (python -m bench): every section, one markdown report.

Figures are medians of interleaved repeats with min and max, and ratios against a
baseline measured in the same run (this machine is noisy). No timing is asserted anywhere.
The report is printed and written to bench-results/results.md.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
from pathlib import Path
from typing import Callable, Dict

ROOT = Path(__file__).resolve().parent.parent
SECTIONS = ("launch", "kit", "launchers", "teardown", "placement", "requeue", "preflight", "hangs",
            "container", "images", "scaling", "bandwidth")
EXTRA = ("doctor-faults", "recovery")  # minutes, and exclusive use of the lab: only with --only
# (recovery kills a node of the lab, revived after each run, and needs three nodes in batch)


def machine() -> str:
    cpu = "?"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import torch

    return (f"{platform.node()}: {os.cpu_count()} cores ({cpu}), Linux {platform.release()}, "
            f"torch {torch.__version__}, "
            f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC")


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    ap.add_argument("--only", action="append", choices=SECTIONS + EXTRA,
                    help="run only these sections")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sizes", default="2,4,8", help="node counts for the scaling section")
    ap.add_argument("--bw-mb", type=int, default=64)
    ap.add_argument("--bw-floor", type=float, default=None, metavar="GBPS",
                    help="bandwidth section: examples/allreduce_bw.py's --floor (GB/s)")
    a = ap.parse_args()
    from bench import bandwidth_bench, cluster_bench, doctor_bench, hangs_bench, image_bench, \
        kit_bench, launchers_bench, netns_bench, recovery_bench

    sizes = [int(n) for n in a.sizes.split(",")]
    sections: Dict[str, Callable[[], str]] = {
        "launch": lambda: cluster_bench.launch(a.repeats),
        "kit": lambda: kit_bench.kit(a.repeats),
        "launchers": lambda: launchers_bench.launchers(a.repeats),
        "teardown": lambda: cluster_bench.teardown(a.repeats),
        "placement": lambda: cluster_bench.placement(a.repeats),
        "requeue": lambda: cluster_bench.requeue(a.repeats),
        "preflight": lambda: doctor_bench.preflight(a.repeats),
        "doctor-faults": lambda: doctor_bench.faults(),
        "recovery": lambda: recovery_bench.recovery(a.repeats),
        "hangs": lambda: hangs_bench.hangs(a.repeats),
        "container": lambda: netns_bench.with_network(
            2, lambda r: netns_bench.container(r, ROOT / "image.sif", a.bw_mb, a.repeats)),
        "images": lambda: image_bench.images(a.repeats),
        "scaling": lambda: netns_bench.with_network(
            max(sizes), lambda r: netns_bench.scaling(r, sizes, a.repeats)),
        "bandwidth": lambda: bandwidth_bench.bandwidth(a.repeats, a.bw_floor),
    }
    titles = {"launch": "Launch latency",
              "kit": "The kit's code called by path vs carried as text (issue 27)",
              "launchers": "Launch latency per launcher (the same program under each)",
              "teardown": "Failure teardown",
              "placement": "CPU placement (strict lab: tasks bound to cores)",
              "requeue": "Requeue (signal -> running again)",
              "preflight": "Preflight (launch.preflight: the doctor before the launch)",
              "doctor-faults": "Faults: the doctor vs the job without preflight",
              "recovery": "Recovery (job.spare_nodes: a node killed -> the next step)",
              "hangs": "Hangs (launch.hang_timeout: step time, hang -> report)",
              "container": "Container overhead", "images": "Images",
              "scaling": "Rendezvous scaling (namespace nodes, JSC-like network)",
              "bandwidth": "all_reduce bus bandwidth per node pair (gloo, allreduce_bw.py)"}
    report = [f"# Bench results\n\nMachine: {machine()}\n"]
    for name in a.only or SECTIONS:
        print(f"bench: {name} ...", file=sys.stderr, flush=True)
        report.append(f"## {titles[name]}\n\n{sections[name]()}\n")
        print(report[-1], flush=True)
    out = ROOT / "bench-results" / "results.md"
    out.parent.mkdir(exist_ok=True)
    out.write_text("\n".join(report))
    print(f"bench: report written to {out.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
