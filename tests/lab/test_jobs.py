"""Ring 3: the checked-in jobscripts (jobs/*.job, rendered by the composer) on the local cluster.

Submitted unchanged from the repository root, as a user would (`sbatch jobs/NAME.job`); only the
batch output is redirected (-o) so that runs do not litter the checkout. Also: the same container
job with stock torchrun fails (the network really is JSC-like), and a bad spec never reaches sbatch.
"""

from __future__ import annotations

import os
import re
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.helpers.labjobs import make

REPO = Path(__file__).resolve().parents[2]
PY = os.environ.get("VENV", str(REPO / ".venv")) + "/bin/python"
JOB_TIMEOUT_S = 300


def run_checked_in(cluster, shared_tmp: Path, jobfile: Path, name: str | None = None):
    name = name or jobfile.stem
    res = cluster.run_job(str(jobfile), ["-o", str(shared_tmp / f"{name}-%j.out")],
                          timeout=JOB_TIMEOUT_S, cwd=str(REPO))
    for log in (REPO / "logs").glob(f"*-{res.job_id}.*"):  # per-node logs the job wrote
        log.unlink()
    print(f"{jobfile.name}: job {res.job_id} {res.state} submit->done {res.elapsed_s:.1f} s")
    return res


@pytest.fixture(scope="module")
def image() -> Path:
    make("image")
    return REPO / "image.sif"


@pytest.mark.parametrize("name", ["ddp_venv", "ddp_container", "ddp_srun", "ddp_mpirun_torchrun"])
def test_checked_in_ddp_job(cluster, request, shared_tmp, name):
    """Each DDP jobscript as checked in: completes on 2 nodes with a right summary."""
    job = REPO / "jobs" / f"{name}.job"
    if "image.sif" in job.read_text():
        request.getfixturevalue("image")
    res = run_checked_in(cluster, shared_tmp, job)
    assert res.state == "COMPLETED", res.output
    [summary] = res.summaries
    world = cluster.expected_world_size(str(job), res)
    assert world >= 4 and cluster.check_summary(summary, world) == [], (world, summary)
    assert summary["hosts"] == ["jwb0001", "jwb0002"]
    # The lab binds tasks to cores like a real site. A per-node launcher (torchrun_jsc, also
    # under mpirun) must hand every worker all of the node's cores; one task per GPU gets its
    # share of them. The program reports each rank's os.sched_getaffinity.
    cores = os.cpu_count()
    per_task = 1 if name in ("ddp_venv", "ddp_container", "ddp_mpirun_torchrun") else world // 2
    assert summary["allowed_cpus_min"] == cores // per_task, summary


def test_ddp_container_job_with_stock_torchrun_fails(cluster, image, shared_tmp):
    """The same jobscript with torch's own torchrun (short read timeout so it fails fast: the
    user's part of --rdzv_conf comes last and wins, as PET_RDZV_CONF's would)."""
    text = (REPO / "jobs/ddp_container.job").read_text()
    user_conf = 'rdzv_conf_user="${PET_RDZV_CONF:+,${PET_RDZV_CONF}}"'
    assert text.count(user_conf) == 1, text
    text = text.replace(user_conf, 'rdzv_conf_user=",read_timeout=10,join_timeout=30"')
    # The kit's torchrun_jsc (python3 "${kit}/task/run.py" torchrun_jsc, maybe wrapped).
    kit_torchrun = re.compile(r'python3 "\$\{kit\}/task/run\.py"(?: \\\n *| )torchrun_jsc\b')
    assert len(kit_torchrun.findall(text)) == 1, "expected one torchrun_jsc launch"
    job = shared_tmp / "ddp_container_stock.job"
    job.write_text(kit_torchrun.sub("torchrun", text))
    res = run_checked_in(cluster, shared_tmp, job)
    assert res.state == "FAILED", res.output
    assert res.summaries == []
    assert "RendezvousConnectionError" in res.output or "RendezvousTimeoutError" in res.output, \
        res.output


def jobs_named(name: str) -> list[str]:
    """Jobs with this name that slurmctld knows (running, or ended less than MinJobAge ago)."""
    p = subprocess.run(["scontrol", "show", "job", "-o"], capture_output=True, text=True,
                       timeout=30, check=False)
    return [line.split()[0] for line in p.stdout.splitlines() if f" JobName={name} " in line]


def test_bad_spec_never_reaches_sbatch(cluster, shared_tmp):
    good = (REPO / "jobs/ddp_venv.yaml").read_text()
    assert "nodes: 2" in good
    bad = shared_tmp / "bad.yaml"
    bad.write_text(good.replace("nodes: 2", "nodes: two"))
    name = f"badspec-{uuid.uuid4().hex[:8]}"
    p = subprocess.run([PY, "-m", "launcher", "submit", "-o", str(shared_tmp / "bad.job"), str(bad),
                        "--", "-J", name], capture_output=True, text=True, timeout=60,
                       cwd=REPO, check=False)
    assert p.returncode == 2, p.stdout + p.stderr
    assert "nodes" in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert not (shared_tmp / "bad.job").exists()
    assert jobs_named(name) == []

    # Control: the same command with the good spec does reach Slurm (then is cancelled).
    ok = shared_tmp / "ok.yaml"
    ok.write_text(good)
    name_ok = f"goodspec-{uuid.uuid4().hex[:8]}"
    p = subprocess.run([PY, "-m", "launcher", "submit", "-o", str(shared_tmp / "ok.job"), str(ok),
                        "--", "-J", name_ok, "--hold", "-o", str(shared_tmp / "ok-%j.out")],
                       capture_output=True, text=True, timeout=60, cwd=REPO, check=False)
    assert p.returncode == 0, p.stdout + p.stderr
    ids = jobs_named(name_ok)
    assert len(ids) == 1, ids
    subprocess.run(["scancel", "--name", name_ok], timeout=30, check=True)
