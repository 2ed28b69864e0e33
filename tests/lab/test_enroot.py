"""Ring 3: real Enroot 4.1.2 and pyxis 0.24.0 on the local cluster (scripts/enroot-setup.sh).

The checked-in ddp_enroot and ddp_pyxis jobs, submitted unchanged; a job cancelled while
`enroot create` runs, then the next job; root and the lab's second user on one node; and what
a program sees inside each runtime (Slurm's per-task variables, GPUs, socket interface).
Missing Enroot or pyxis fails each test with one line saying what to install, never a skip.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from launcher.render.jobscript import render_jobscript
from launcher.spec import parse_spec
from tests.helpers.labjobs import make

REPO = Path(__file__).resolve().parents[2]
TIMEOUT_S = 240
PYXIS = Path("/usr/local/lib/slurm/spank_pyxis.so")
# The tiny program: what it sees, one JSON line per task.
SHOW_ENV = ("import json, os; print('ENV ' + json.dumps({k: os.environ.get(k) for k in ("
            "'SLURM_PROCID', 'SLURM_NODEID', 'SLURM_LOCALID', 'SLURM_JOB_ID', "
            "'CUDA_VISIBLE_DEVICES', 'NVIDIA_VISIBLE_DEVICES', 'GLOO_SOCKET_IFNAME', "
            "'NCCL_SOCKET_IFNAME', 'SLURM_STEP_GPUS', 'SLURM_JOB_GPUS')}), flush=True)")


@pytest.fixture(scope="module")
def sqsh() -> Path:
    """image.sqsh with the project's own target; Enroot and pyxis present, or one line why not."""
    missing = [what for what, ok in (("enroot", shutil.which("enroot")),
                                     (f"pyxis ({PYXIS})", PYXIS.is_file())) if not ok]
    if missing:
        pytest.fail(f"{' and '.join(missing)} not installed: run `sudo bash "
                    "scripts/enroot-setup.sh` (the releases pinned with a checksum in "
                    "scripts/enroot-pyxis.pins, else ENROOT_PYXIS_TOOLS=DIR or the lab's "
                    "../shared/tools/enroot-pyxis), then restart the cluster", pytrace=False)
    make("enroot-image")
    return REPO / "image.sqsh"


def render(folder: Path, name: str, spec: dict) -> Path:
    job = folder / f"{name}.job"
    job.write_text(render_jobscript(parse_spec(yaml.safe_dump(spec), f"{name}.yaml")))
    job.chmod(0o644)
    return job


def env_spec(runtime: dict, nodes: int = 2) -> dict:
    return {"job": {"nodes": nodes, "gpus_per_node": 4, "node_output": None,
                    "time": "00:05:00"},
            "site": "jsc", "runtime": runtime, "launch": {"mode": "srun", "procs_per_node": 2},
            "program": ["python3", "-c", SHOW_ENV]}


def envs(output: str) -> list[dict]:
    return sorted((json.loads(line.split("ENV ", 1)[1]) for line in output.splitlines()
                   if "ENV {" in line), key=lambda e: int(e["SLURM_PROCID"]))


def finish(cluster, job_id: str, cwd: Path):
    cluster.wait_gone(job_id, TIMEOUT_S)
    info = cluster.job_info(job_id)
    out = cluster.collect_output(job_id, info, str(cwd))
    print(f"job {job_id} {info.get('JobState')}:\n{out[-1500:]}")
    return info.get("JobState"), out


@pytest.mark.parametrize("name", ["ddp_enroot", "ddp_pyxis"])
def test_checked_in_job_trains(cluster, sqsh, shared_tmp, name):
    """jobs/NAME.job as checked in, from the repository root: 2 nodes train, summary right."""
    job_id = cluster.submit(f"jobs/{name}.job", ["-o", str(shared_tmp / "%j.out")], cwd=str(REPO))
    state, out = finish(cluster, job_id, REPO)
    for log in (REPO / "logs").glob(f"*-{job_id}.*"):
        log.unlink()
    assert state == "COMPLETED", out
    [summary] = cluster.parse_summaries(out)
    assert cluster.check_summary(summary, 8) == [] and summary["hosts"] == ["jwb0001", "jwb0002"]
    assert "node_rank=? (none)" not in out


@pytest.mark.parametrize("kind", ["enroot", "pyxis"])
def test_program_sees_what_apptainer_shows(cluster, sqsh, shared_tmp, kind):
    """srun mode, 2 nodes x 2 tasks: per-task Slurm variables, GPUs by Slurm, the interface."""
    job = render(shared_tmp, f"env_{kind}", env_spec({"kind": kind, "image": str(sqsh)}))
    job_id = cluster.submit(str(job), ["-o", str(shared_tmp / "%j.out")], cwd=str(shared_tmp))
    state, out = finish(cluster, job_id, shared_tmp)
    assert state == "COMPLETED", out
    seen = envs(out)
    assert [e["SLURM_PROCID"] for e in seen] == ["0", "1", "2", "3"], out
    assert [e["SLURM_NODEID"] for e in seen] == ["0", "0", "1", "1"]
    assert {e["SLURM_JOB_ID"] for e in seen} == {job_id}
    assert [e["GLOO_SOCKET_IFNAME"] for e in seen] == ["jwb0001i"] * 2 + ["jwb0002i"] * 2
    for e in seen:
        assert e["CUDA_VISIBLE_DEVICES"] and e["NVIDIA_VISIBLE_DEVICES"] not in (None, "", "all")


# Enroot's data path of root on jwb0001 (the lab's enroot.conf: /tmp/enroot-$UID/data, and
# each node's /tmp is this directory of the lab's state).
NODE1_DATA = Path("/run/torchrun-jsc-cluster/node/jwb0001/tmp/enroot-0/data")


def unpacking(before: set) -> bool:
    """A container directory that was not there before the job has files in it."""
    if not NODE1_DATA.is_dir():
        return False
    for entry in os.scandir(NODE1_DATA):
        if entry.name not in before and entry.is_dir(follow_symlinks=False):
            try:
                if any(os.scandir(entry.path)):
                    return True
            except OSError:  # renamed or removed meanwhile
                continue
    return False


@pytest.mark.parametrize("kind", ["enroot", "pyxis"])
def test_cancel_during_create_then_next_job_trains(cluster, sqsh, shared_tmp, kind):
    """scancel while `enroot create` unpacks: the next job removes the partial tree and trains.
    pyxis itself would reuse a partial `pyxis_NAME` (seen here before the kit created pyxis'
    containers itself: the next job's torch lacked its dependencies)."""
    image = shared_tmp / "image.sqsh"
    shutil.copyfile(sqsh, image)  # a fresh stamp: this job must create its container
    shutil.copy(REPO / "examples/ddp_train.py", shared_tmp)  # the container binds only $PWD
    spec = {"job": {"nodes": 1, "gpus_per_node": 4, "node_output": None},
            "site": "jsc", "runtime": {"kind": kind, "image": str(image),
                                       "container_name": "image"},
            "launch": {"mode": "torchrun", "procs_per_node": 2},
            "program": ["python3", "-u", "ddp_train.py", "--steps", "5"]}
    job = render(shared_tmp, "killed", spec)
    before = set(os.listdir(NODE1_DATA)) if NODE1_DATA.is_dir() else set()
    job_id = cluster.submit(str(job), ["-o", str(shared_tmp / "%j.out"), "-w", "jwb0001"],
                            cwd=str(shared_tmp))
    deadline = time.monotonic() + TIMEOUT_S  # the queue may be busy (CI, other users)
    # Cancel while enroot create is unpacking: as soon as the new container's tree has files
    # (a fixed wait either came too late on an idle machine or too early on a loaded one).
    while not unpacking(before):
        assert time.monotonic() < deadline, "the job never started unpacking its container"
        time.sleep(0.05)
    cluster.run(["scancel", job_id])
    state, out = finish(cluster, job_id, shared_tmp)
    assert state == "CANCELLED" and "DDP_SUMMARY" not in out, out
    again = cluster.submit(str(job), ["-o", str(shared_tmp / "%j.out"), "-w", "jwb0001"],
                           cwd=str(shared_tmp))
    state, out = finish(cluster, again, shared_tmp)
    assert state == "COMPLETED", out
    assert "left by an interrupted create" in out and f"{kind}: creating container" in out
    [summary] = cluster.parse_summaries(out)
    assert cluster.check_summary(summary, 2) == []


def test_two_users_on_one_node(cluster, sqsh, shared_tmp):
    """root and the lab's ordinary user run Enroot jobs at once on jwb0001 (own data paths)."""
    ids = {}
    for user in ("root", "jwbuser"):
        folder = shared_tmp / user
        folder.mkdir(mode=0o777)
        folder.chmod(0o777)
        job = render(folder, "env", env_spec({"kind": "enroot", "image": str(sqsh)}, nodes=1))
        argv = ["sbatch", "--parsable", "-w", "jwb0001", "-o", str(folder / "%j.out"), str(job)]
        if user != "root":
            argv = ["runuser", "-u", user, "--"] + argv
        p = subprocess.run(argv, capture_output=True, text=True, cwd=folder, timeout=30,
                           check=False)
        assert p.returncode == 0, p.stderr
        ids[user] = (p.stdout.strip(), folder)
    for user, (job_id, folder) in ids.items():
        state, out = finish(cluster, job_id, folder)
        assert state == "COMPLETED", (user, out)
        assert len(envs(out)) == 2, out


def test_writes_stay_in_their_job(cluster, sqsh, shared_tmp):
    """writable: true writes into a per-job copy; the next (read-only) job does not see it."""
    probe = "touch /etc/kit-leak-probe && echo WROTE; [ -e /etc/kit-leak-probe ] || echo CLEAN"
    for writable, expect in ((True, "WROTE"), (False, "CLEAN")):
        spec = env_spec({"kind": "enroot", "image": str(sqsh), "writable": writable}, nodes=1)
        spec["launch"]["procs_per_node"] = 1
        spec["program"] = ["sh", "-c", probe]
        job = render(shared_tmp, f"writable_{writable}", spec)
        job_id = cluster.submit(str(job), ["-o", str(shared_tmp / "%j.out"), "-w", "jwb0001"],
                                cwd=str(shared_tmp))
        state, out = finish(cluster, job_id, shared_tmp)
        assert state == "COMPLETED" and expect in out, out
        assert ("WROTE" in out) == writable, out
