"""Ring 3: submitit from Python with a job spec, on the local cluster (JSC-like network).

examples/submitit_sum.py submits the distributed sum through launcher.submitit.executor_for:
2 nodes x 2 tasks, bare (this venv's Python on the nodes) and in launchers.sif (which has
submitit; `make launchers-image`). Each rank returns what it saw through job.results();
checked: world size 4, sum 10 on every rank, ranks 0..3 on both nodes, the rendezvous on the
first node's inter-node name (jwb0001i: submitit's own TorchDistributedEnvironment would
take the hostname jwb0001, which the lab's nodes cannot reach), and where the tasks ran.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
PY = os.environ.get("VENV", str(REPO / ".venv")) + "/bin/python"
EXAMPLE = REPO / "examples" / "submitit_sum.py"
PREFIX = "SUBMITIT_SUM "


def submit(spec: Path, folder: Path) -> tuple[subprocess.CompletedProcess, dict]:
    p = subprocess.run([PY, str(EXAMPLE), "--spec", str(spec), "--folder", str(folder / "%j"),
                        "--timeout", "500"], capture_output=True, text=True, timeout=600,
                       cwd=REPO, check=False)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith(PREFIX)]
    summary = json.loads(lines[0][len(PREFIX):]) if len(lines) == 1 else {}
    return p, summary


def check(p: subprocess.CompletedProcess, summary: dict, in_container: bool) -> None:
    assert p.returncode == 0, p.stdout + p.stderr
    assert summary["ok"] is True and summary["world_size"] == 4
    assert (summary["sum"], summary["expected"]) == (10, 10)
    assert summary["ranks"] == [0, 1, 2, 3]
    assert summary["hosts"] == ["jwb0001", "jwb0002"]
    assert summary["master_addr"] == "jwb0001i"
    assert summary["backend"] == "gloo"
    assert summary["in_container"] is in_container
    ranks = [ln for ln in p.stdout.splitlines() if ln.startswith("rank ")]
    assert len(ranks) == 4 and all("sum 10 (expected 10) via jwb0001i" in ln for ln in ranks)
    # Each node picked the interface that routes to jwb0001i: its own `i` interface.
    assert {ln.split()[3]: ln.split()[-1] for ln in ranks} == {"jwb0001:": "jwb0001i",
                                                                "jwb0002:": "jwb0002i"}


def test_submitit_bare_two_nodes_two_tasks(cluster, shared_tmp):
    spec = shared_tmp / "sum_submitit_bare.yaml"
    spec.write_text(yaml.safe_dump({
        "job": {"nodes": 2, "time": "00:05:00", "partition": "batch"},
        "site": "jsc", "runtime": "bare",
        "launch": {"mode": "srun", "procs_per_node": 2},
        "program": ["python3", "-u", "examples/distributed_sum.py"]}))
    p, summary = submit(spec, shared_tmp)
    check(p, summary, in_container=False)


def test_submitit_in_apptainer_two_nodes_two_tasks(cluster, shared_tmp):
    """jobs/sum_submitit.yaml with runtime.stage: launchers.sif copied to each node's /tmp by
    the set-up lines of submitit's own batch script, every task started from the copy, the
    copy removed at the script's end."""
    made = subprocess.run(["make", "launchers-image"], capture_output=True, text=True,
                          timeout=2400, cwd=REPO, check=False)
    assert made.returncode == 0, f"make launchers-image failed:\n{made.stdout}\n{made.stderr}"
    data = yaml.safe_load((REPO / "jobs/sum_submitit.yaml").read_text())
    data["runtime"].update(image=str(REPO / "launchers.sif"), stage=True)
    spec = shared_tmp / "sum_submitit_staged.yaml"
    spec.write_text(yaml.safe_dump(data))
    p, summary = submit(spec, shared_tmp)
    check(p, summary, in_container=True)
    logs = "".join(f.read_text() for f in shared_tmp.glob("*/*_log.out"))
    staged = re.search(r"^job (\d+): image \S+/launchers.sif staged to /tmp on 2 nodes in "
                       r"[\d.]+ s \(sbcast, \d+ bytes\): the steps run (\S+)$", logs, re.M)
    assert staged, logs
    assert f"job {staged.group(1)}: staged image {staged.group(2)} removed on 2 nodes" in logs, \
        logs


def test_submitit_in_enroot_two_nodes_two_tasks(cluster, shared_tmp):
    """launchers.sif's root filesystem as a squashfs, created once per node by the composer's
    Enroot step, each task's Python started in it (the lab's real Enroot 4.1.2)."""
    assert shutil.which("enroot"), "enroot not installed: run `sudo bash scripts/enroot-setup.sh`"
    made = subprocess.run(["make", "launchers-enroot-image"], capture_output=True, text=True,
                          timeout=2400, cwd=REPO, check=False)
    assert made.returncode == 0, f"make launchers-enroot-image failed:\n{made.stdout}\n{made.stderr}"
    spec = shared_tmp / "sum_submitit_enroot.yaml"
    spec.write_text(yaml.safe_dump({
        "job": {"nodes": 2, "time": "00:05:00", "partition": "batch"},
        "site": "jsc", "runtime": {"kind": "enroot", "image": str(REPO / "launchers.sqsh")},
        "launch": {"mode": "srun", "procs_per_node": 2},
        "program": ["python3", "-u", "examples/distributed_sum.py"]}))
    p, summary = submit(spec, shared_tmp)
    check(p, summary, in_container=True)


def test_a_bad_spec_is_one_line_and_submits_nothing(shared_tmp):
    spec = shared_tmp / "pyxis.yaml"
    spec.write_text("job: {nodes: 2}\nruntime: {kind: pyxis, image: image.sqsh}\n"
                    "program: [python3]\n")
    p, summary = submit(spec, shared_tmp)
    assert p.returncode == 2 and summary == {} and "submitted job" not in p.stdout
    [line] = p.stderr.splitlines()
    assert line.startswith(f"submitit_sum: {spec}: runtime.kind: submitit cannot use pyxis: ")


FAILING_TASKS = """
import sys, time
from launcher.submitit import executor_for
ex = executor_for(sys.argv[1], sys.argv[2], python="/bin/false")  # every task fails at once
job = ex.submit(print, "never runs")
start = time.monotonic()
try:
    job.results()
except Exception as e:  # submitit's UncompletedJobError, told by sacct that the job failed
    print(f"RAISED {type(e).__name__} after {time.monotonic() - start:.0f} s: {e}")
    print(f"STATE {job.state}")
else:
    print("NO ERROR")
"""


def test_failed_tasks_end_results_quickly_through_accounting(cluster, shared_tmp):
    """The lab runs slurmdbd like real sites: submitit learns from sacct that a job whose
    tasks all failed is FAILED, and job.results() raises instead of waiting (without
    accounting it waited more than ten minutes for a job that was long gone)."""
    spec = shared_tmp / "fails.yaml"
    spec.write_text(yaml.safe_dump({
        "job": {"nodes": 2, "time": "00:05:00", "partition": "batch"},
        "site": "jsc", "runtime": "bare",
        "launch": {"mode": "srun", "procs_per_node": 1}, "program": ["python3"]}))
    p = subprocess.run([PY, "-c", FAILING_TASKS, str(spec), str(shared_tmp / "%j")],
                       capture_output=True, text=True, timeout=400, cwd=REPO, check=False)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "NO ERROR" not in p.stdout
    [raised] = [ln for ln in p.stdout.splitlines() if ln.startswith("RAISED ")]
    assert "UncompletedJobError" in raised or "FailedJobError" in raised, raised
    assert "STATE FAILED" in p.stdout, p.stdout
    seconds = int(raised.split(" after ")[1].split(" s:")[0])
    assert seconds < 240, raised  # submitit polls sacct every so often; never the 10+ minutes


def test_an_image_without_submitit_is_refused_before_submitting(shared_tmp):
    """image.sif (the PyTorch image) has no submitit: executor_for asks the image with the
    real Apptainer on this machine and refuses in one line, before anything reaches Slurm
    (submitted, the worker would fail on every node at once)."""
    image = REPO / "image.sif"
    assert image.is_file(), "image.sif missing: run `make image`"
    spec = shared_tmp / "no_submitit.yaml"
    spec.write_text(yaml.safe_dump({
        "job": {"nodes": 2, "time": "00:05:00"}, "site": "jsc",
        "runtime": {"kind": "apptainer", "image": str(image)},
        "launch": {"mode": "srun", "procs_per_node": 2}, "program": ["python3"]}))
    p, summary = submit(spec, shared_tmp)
    assert p.returncode == 2 and summary == {} and "submitted job" not in p.stdout
    [line] = p.stderr.splitlines()
    assert line.startswith(f"submitit_sum: {spec}: runtime.image: submitit's worker cannot run "
                           "in this image (ModuleNotFoundError: No module named"), line
