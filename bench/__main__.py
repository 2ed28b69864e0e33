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
            "storage", "container", "images", "scaling", "bandwidth")
# minutes, and exclusive use of the lab (scale resizes it to up to 64 nodes; recovery kills
# a node, revived after each run, and needs three nodes in batch): only with --only
EXTRA = ("doctor-faults", "scale", "rendezvous", "recovery", "stage")


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
    ap.add_argument("--scale-sizes", default="2,8,32,64",
                    help="node counts for the scale section (the lab is resized to each)")
    ap.add_argument("--scale-variants", default="floor,torchrun,kit-torchrun,kit-srun",
                    help="scale section: which of floor, torchrun, kit-torchrun, kit-srun, "
                         "kit-torchrun-bare")
    ap.add_argument("--stage-sizes", default="8,32,64",
                    help="node counts for the stage section (the lab is resized to each)")
    ap.add_argument("--rdzv-sizes", default="8,64,128,256",
                    help="agent counts for the rendezvous section (threads, no Slurm)")
    ap.add_argument("--bw-mb", type=int, default=64)
    ap.add_argument("--bw-floor", type=float, default=None, metavar="GBPS",
                    help="bandwidth section: examples/allreduce_bw.py's --floor (GB/s)")
    a = ap.parse_args()
    from bench import bandwidth_bench, cluster_bench, doctor_bench, hangs_bench, image_bench, \
        kit_bench, launchers_bench, netns_bench, rdzv_bench, recovery_bench, scale_bench, \
        stage_bench, storage_bench

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
        "storage": lambda: storage_bench.storage(),
        "container": lambda: netns_bench.with_network(
            2, lambda r: netns_bench.container(r, ROOT / "image.sif", a.bw_mb, a.repeats)),
        "images": lambda: image_bench.images(a.repeats),
        "scaling": lambda: netns_bench.with_network(
            max(sizes), lambda r: netns_bench.scaling(r, sizes, a.repeats)),
        "bandwidth": lambda: bandwidth_bench.bandwidth(a.repeats, a.bw_floor),
        "rendezvous": lambda: rdzv_bench.rendezvous(
            [int(n) for n in a.rdzv_sizes.split(",")], a.repeats),
        "stage": lambda: stage_bench.stage([int(n) for n in a.stage_sizes.split(",")],
                                           a.repeats),
        "scale": lambda: scale_bench.scale([int(n) for n in a.scale_sizes.split(",")],
                                           a.repeats, a.scale_variants.split(",")),
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
              "storage": "The hang machinery's load on shared storage, 64 nodes x 4 ranks",
              "container": "Container overhead", "images": "Images",
              "scaling": "Rendezvous scaling (namespace nodes, JSC-like network)",
              "bandwidth": "all_reduce bus bandwidth per node pair (gloo, allreduce_bw.py)",
              "rendezvous": "c10d rendezvous of N agents: join time, store host CPU, "
                            "the open-file limit (issue 36)",
              "scale": "Time to the first step at N nodes, per phase, and its CPU (issue 36)",
              "stage": "runtime.stage: the image broadcast to N nodes vs N direct reads "
                       "(issue 36)"}
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
