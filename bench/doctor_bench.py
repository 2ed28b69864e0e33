"""Bench sections for the doctor (launcher/node/doctor, launcher/submit/doctor.py): what launch.preflight costs, and what the
faults it names cost a job without it.

- preflight: the launch section's apptainer job (2 nodes x 2 processes, torchrun_jsc; the
  job's start -> every rank past its first all_reduce) with and without
  `launch.preflight: true`, interleaved, and the step's own duration from its table
  (target < 2 s).
- doctor-faults: each fault of tests/lab/test_doctor.py once, under an exclusive allocation
  of both nodes (tests/helpers/labfaults.py applies and restores it): `python -m launcher doctor`
  (time to the table, and the cells it crossed) against the same job without the preflight
  (run with bash in the allocation, capped at FAULT_CAP_S: time to its end, or "hangs").
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional

from bench.cluster_bench import PROGRAM, slurmjob, spec_yaml
from bench.stats import Series, interleave, ratio, seconds_to_ready, table

ROOT = Path(__file__).resolve().parent.parent
PORT = 28431  # as tests/lab/test_doctor.py
FAULT_CAP_S = 90
TORCH_PROGRAM = ["python3", "-c", "import torch.distributed as d; d.init_process_group('gloo');"
                 " d.barrier(); print('TRAINED')"]


def _job(name: str, preflight: bool) -> str:
    """The launch section's apptainer job, with or without the preflight; the bench adds one
    line that stamps the job's start, so queue waits (the lab is shared) do not count."""
    from bench.jobs import compose

    out_dir = ROOT / "bench-results" / "jobs"
    spec = spec_yaml(name, "torchrun", "apptainer", PROGRAM).replace(
        "launch: {", f"launch: {{preflight: {str(preflight).lower()}, ")
    text = compose(name, spec)
    text = text.replace("set -euo pipefail\n", 'set -euo pipefail\necho "JOBSTART t=$(date +%s.%N)"\n', 1)
    (out_dir / f"{name}.job").write_text(text)
    return f"bench-results/jobs/{name}.job"


def _run(jobfile: str, steps: List[float]) -> Optional[float]:
    """Job start -> every rank past its first all_reduce; the preflight step's own duration
    (the table's last line) goes to ``steps``."""
    job_id = slurmjob.submit(jobfile, cwd=str(ROOT))
    slurmjob.wait_gone(job_id, 600)
    out = slurmjob.collect_output(job_id, slurmjob.job_info(job_id), str(ROOT))
    m = re.search(r"JOBSTART t=([\d.]+)", out)
    step = re.search(r"doctor: all checks passed \(step ([\d.]+) s\)", out)
    if step:
        steps.append(float(step.group(1)))
    ready = seconds_to_ready(out, float(m.group(1)), 4) if m else None
    if ready is None:
        print(f"bench: {jobfile}: not all 4 ranks ready\n{out[-2000:]}", file=sys.stderr)
    return ready


def preflight(repeats: int) -> str:
    plain, checked = _job("bench_preflight_off", False), _job("bench_preflight_on", True)
    steps: List[float] = []
    s = interleave({"plain": lambda: _run(plain, []), "preflight": lambda: _run(checked, steps)},
                   repeats)
    step = Series("step", steps)
    return table(["2 nodes x 2 procs, apptainer, job start -> first all_reduce", "time",
                  "ratio"],
                 [["without launch.preflight", s["plain"].cell("s"), "1.00x"],
                  ["with launch.preflight: true", s["preflight"].cell("s"),
                   ratio(s["preflight"], s["plain"])],
                  ["the preflight step itself (srun, checks on 2 nodes, table)",
                   step.cell("s"), "target < 2 s"]])


def _spec(folder: Path, name: str, fault: str, preflight: bool) -> Path:
    tag = folder.name
    suffix = "-ib" if fault == "suffix" else "i"
    image = f"/tmp/{tag}-img/image.sif" if fault == "image" else str(ROOT / "image.sif")
    binds = f"[/tmp/{tag}-bind]" if fault == "bind" else "[]"
    prog = ", ".join(json.dumps(a) for a in TORCH_PROGRAM)
    text = (f"job: {{name: {name}, nodes: 2, time: '5', partition: batch, node_output: null}}\n"
            f"site: {{profile: generic, hostname_suffix: '{suffix}'}}\n"
            f"runtime: {{kind: apptainer, image: {image}, binds: {binds}}}\n"
            f"launch: {{rdzv_port: {PORT}, preflight: {str(preflight).lower()}}}\n"
            f"program: [{prog}]\n")
    path = folder / f"{name}.yaml"
    path.write_text(text)
    return path


def _allocated(folder: Path, scenario: str, cmd: List[str], cap: float) -> Dict[str, object]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update(PYTHONPATH=str(ROOT), DOCTOR_IMAGE=str(ROOT / "image.sif"))
    argv = ["salloc", "-N2", "--exclusive", "-p", "batch", "-t", "5", sys.executable,
            str(ROOT / "tests/helpers/labfaults.py"), scenario, str(PORT), folder.name, "--",
            "timeout", str(cap), *cmd]
    done = subprocess.run(argv, cwd=folder, env=env, capture_output=True, text=True,
                          timeout=cap + 1800, check=False)  # queue waits: the lab is shared
    run = [json.loads(l[11:]) for l in done.stdout.splitlines() if l.startswith("labfaults: ")]
    return {"run": run[0] if run else None, "out": done.stdout + done.stderr}


FAULTS = {  # fault -> the labfaults scenario that applies it
    "wrong site suffix (no such name)": ("suffix", "none"),
    "traffic between the i interfaces dropped": ("drop", "drop"),
    "rendezvous port taken on the first node": ("port", "port"),
    "bind source missing on one node": ("bind", "bind"),
    "image unreadable on one node": ("image", "image"),
    "name resolves to another address on one node": ("hosts", "hosts"),
}


CAUSES = ("torchrun_jsc: error", "FATAL", "Error", "error:")  # the job's own words, first


def _verdict(result: Dict[str, object], cap: float) -> str:
    run = result["run"]
    if not isinstance(run, dict):
        return "did not run"
    out = str(result["out"])
    if run["rc"] == 124:
        return f"hangs: killed at {cap:.0f} s"
    if "TRAINED" in out:
        return f"{run['seconds']:.1f} s, ran (rc {run['rc']})"
    lines = [l.strip() for l in out.splitlines() if not l.startswith(("srun:", "salloc:"))]
    for word in CAUSES:
        found = [l for l in lines if word in l]
        if found:
            return f"{run['seconds']:.1f} s, rc {run['rc']}: {found[0][:160]}"
    return f"{run['seconds']:.1f} s, rc {run['rc']}"


def faults(cap: float = FAULT_CAP_S) -> str:
    folder = ROOT / "build" / "lab-tmp" / f"doctor-bench-{os.getpid()}"
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for title, (fault, scenario) in FAULTS.items():
        doc = _spec(folder, "with", fault, True)
        job = folder / "without.job"
        from launcher.render.jobscript import render_jobscript
        from launcher.spec import load_spec

        job.write_text(render_jobscript(load_spec(str(_spec(folder, "without", fault, False)))))
        d = _allocated(folder, scenario, [sys.executable, "-m", "launcher", "doctor", "--json",
                                          doc.name], 60)
        docs = [json.loads(l) for l in str(d["out"]).splitlines() if l.startswith("{")]
        named = ", ".join(f"{f['node']} {f['check']}" for f in docs[0]["failures"]) \
            if docs else "no table"
        took = d["run"]["seconds"] if isinstance(d["run"], dict) else float("nan")
        w = _allocated(folder, scenario, ["bash", job.name], cap)
        rows.append([title, f"{took:.1f} s: {named}", _verdict(w, cap)])
    return table(["fault", "doctor (crosses)", "the job without preflight"], rows)
