"""Ring 3: a PyTorch Lightning program (the real `lightning` package from PyPI, in the project's
venv) requeues itself through the kit's job.requeue, with nothing of the kit in the program
(issue 34). srun mode (one task per node: Lightning's SLURMEnvironment), bare runtime with the
venv, `job.requeue: {signal: USR1}` (Lightning's requeue signal). After a few steps the test
sends the job's signal as a preemption would (`scancel -b --signal=USR1`): the jobscript's trap
passes it to every rank, the kit's hook hands it to Lightning's own handler (no kit API), which
saves its hpc checkpoint and has rank 0 call `scontrol requeue`; the next attempt resumes from it.

Checked from what the program and the script printed: one requeue (Lightning's; the script's
own requeue never ran: no "checkpointed" line), the job COMPLETED, the second attempt started at
the step the first one saved and ended at --steps, on both nodes, under SLURMEnvironment."""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PY = REPO / ".venv" / "bin" / "python"
STEPS = 40
SPEC = """\
job:
  nodes: 2
  time: "00:05:00"
  partition: batch
  requeue: {{signal: USR1, before: 60, max: 2}}
  node_output: null
site:
  profile: jsc
  venv: {venv}
launch:
  mode: srun
  procs_per_node: 1
program: [python3, -u, {program}, --steps, {steps}, --root, {root}]
"""


def sh(*argv: str, cwd: Path = REPO) -> str:
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, cwd=cwd,
                          check=False).stdout


def info(job_id: str) -> dict:
    return dict(t.split("=", 1) for t in sh("scontrol", "show", "job", "-o", job_id).split()
                if "=" in t)


def test_lightning_requeues_itself_through_the_kits_signal(cluster, shared_tmp):
    spec = shared_tmp / "lightning.yaml"
    spec.write_text(SPEC.format(venv=REPO / ".venv", steps=STEPS, root=shared_tmp / "root",
                                program=REPO / "tests/helpers/programs/lightning_train.py"))
    job = shared_tmp / "lightning.job"
    p = subprocess.run([str(PY), "-m", "launcher", "render", str(spec), "-o", str(job)],
                       capture_output=True, text=True, timeout=60, cwd=REPO, check=False)
    assert p.returncode == 0, p.stderr
    out = shared_tmp / "lightning.out"
    job_id = sh("sbatch", "--parsable", "-o", str(out), str(job)).strip()  # from the clone
    assert job_id, "sbatch failed"
    deadline, signalled, held = time.monotonic() + 300, False, {}
    while sh("squeue", "-h", "-j", job_id).strip():
        assert time.monotonic() < deadline, out.read_text() if out.exists() else "no output"
        i = info(job_id)
        if i.get("JobState") == "PENDING" and i.get("Reason") == "BeginTime":
            # Requeued: Slurm holds it for the credential lifetime (tests/lab/test_requeue.py).
            since = held.setdefault(i.get("Restarts"), time.monotonic())
            if time.monotonic() - since > 2:
                sh("scontrol", "update", f"JobId={job_id}", "StartTime=now")
        text = out.read_text() if out.exists() else ""
        if not signalled and re.search(r"^LIGHTNING_STEP 5$", text, re.M):
            sh("scancel", "-b", "--signal=USR1", job_id)  # as a preemption sends it
            signalled = True
        time.sleep(0.5)
    i, text = info(job_id), out.read_text()
    assert signalled, text
    assert i["JobState"] == "COMPLETED" and i["Restarts"] == "1", (i, text)
    assert "attempt 1, requeued at most 2 times" in text and "attempt 2," in text, text
    assert "Handling auto-requeue signal: 10" in text, text  # Lightning's own handler ran
    assert "checkpointed:" not in text, text  # the script's own requeue never ran
    [summary] = [json.loads(line.split(" ", 1)[1]) for line in text.splitlines()
                 if line.startswith("LIGHTNING_SUMMARY ")]
    assert summary["environment"] == "SLURMEnvironment" and summary["world_size"] == 2, summary
    assert summary["hosts"] == ["jwb0001", "jwb0002"] and summary["restart"] == "1", summary
    assert summary["global_step"] == STEPS and 5 <= summary["start_step"] < STEPS, summary
    assert f"job {job_id}: finished" in text, text
