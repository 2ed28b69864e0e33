"""Ring 3: the venv path without containers, on the local cluster.

`jsc-compose venv` builds a venv in a job on a compute node (module purge, the spec's
modules through a fake `module` command, pip from the local wheels only: the lab's nodes
have no route off the machine), then a DDP job runs from it; a second run whose spec loads
other modules warns, and still runs. The submit environment has no torch and no PYTHONPATH,
so only the built venv can run the job.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
MODULECMD = REPO / "tests" / "helpers" / "modulecmd"
PIP = ["--no-index", "--find-links", "/opt/wheels", "--find-links", "/opt/pypi/files"]


def write_spec(path: Path, name: str, modules: list) -> None:
    path.write_text(yaml.safe_dump({
        "job": {"nodes": 2, "name": name, "time": "00:10:00"},
        "site": {"profile": "jsc", "venv": "venv", "modules": modules,
                 "env": {"NCCL_IB_GID_INDEX": "3"}, "venv_build": {"pip_options": PIP}},
        "launch": {"mode": "torchrun", "procs_per_node": 2},
        "program": ["python3", "-u", str(REPO / "examples/ddp_train.py"), "--steps", "10"]}))


def job_env(tmp: Path) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    (tmp / "modules").mkdir()
    env.update(PATH=f"{MODULECMD}:/usr/bin:/bin:/usr/sbin:/sbin",
               FAKE_MODULES_DIR=str(tmp / "modules"))
    return env


def compose(env: dict, cwd: Path, *args: str) -> str:
    # Not PYTHONPATH: sbatch would pass it on to the job, and the job must use the venv only.
    code = f"import sys; sys.path.insert(0, {str(REPO)!r}); from launcher.cli import main; " \
           f"sys.exit(main({list(args)!r}))"
    p = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True,
                       text=True, timeout=60, check=False)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


def test_venv_built_in_a_job_then_ddp_runs_from_it(cluster, shared_tmp):
    tag = uuid.uuid4().hex[:6]
    env = job_env(shared_tmp)
    write_spec(shared_tmp / "run.yaml", f"venv-run-{tag}", ["Stages/2025", "GCC"])
    (shared_tmp / "requirements.txt").write_text(f"torch==2.13.0\nnumpy\npyyaml\n{REPO}\n")
    job_id = compose(env, shared_tmp, "venv", "run.yaml").strip()
    cluster.wait_gone(job_id, timeout=300)
    info = cluster.job_info(job_id)
    out = Path(info["StdOut"]).read_text()
    print(f"build job {job_id} {info['JobState']}:\n{out[-1500:]}")
    assert info["JobState"] == "COMPLETED", out[-3000:]
    assert "module: purge\nmodule: load Stages/2025\nmodule: load GCC\n" in out
    assert "outside environment" not in out  # pip saw no launcher but the one it installed
    assert os.readlink(shared_tmp / "venv").startswith(f"venv.builds/{job_id}.")
    assert (shared_tmp / "venv" / ".jsc-modules").read_text() == "Stages/2025\nGCC\n"

    compose(env, shared_tmp, "render", "run.yaml", "-o", "run.job")
    res = cluster.run_job("run.job", cwd=str(shared_tmp), env=env, timeout=300)
    print(f"run job {res.job_id} {res.state}:\n{res.output[-1500:]}")
    assert res.state == "COMPLETED", res.output
    [summary] = res.summaries
    assert cluster.check_summary(summary, 4) == [], summary
    assert "module: load Stages/2025" in res.output and "warning:" not in res.output

    write_spec(shared_tmp / "other.yaml", f"venv-other-{tag}", ["Stages/2024"])
    compose(env, shared_tmp, "render", "other.yaml", "-o", "other.job")
    res = cluster.run_job("other.job", cwd=str(shared_tmp), env=env, timeout=300)
    print(f"run job {res.job_id} (other modules) {res.state}:\n{res.output[-1500:]}")
    assert res.state == "COMPLETED", res.output
    assert ("warning: the venv was built with modules [Stages/2025 GCC] but this job loads "
            "[Stages/2024] (venv/.jsc-modules): rebuild it with jsc-compose venv") in res.output
    assert cluster.check_summary(res.summaries[0], 4) == []
