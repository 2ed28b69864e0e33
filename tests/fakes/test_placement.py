"""Ring 2: every srun a rendered script writes gets its CPUs on its own command line.

Slurm 23.11 dropped SRUN_CPUS_PER_TASK (CHANGELOG 23.11: "Replace SRUN_CPUS_PER_TASK with
SLURM_CPUS_PER_TASK"), and a bound task (psslurm, task/affinity) gets only cpus_per_task
hardware threads, its workers included. The fake srun (tests/helpers/fake.py) honours only the
23.11 contract: --cpus-per-task/-c, else SLURM_CPUS_PER_TASK, else 1; it refuses a step that
asks for more CPUs per node than the job may use (one per core under --hint=nomultithread or
--threads-per-core=1), as srun does ("More processors requested than permitted").
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List

import pytest

from tests.helpers import fake
from tests.helpers.cluster import Cluster, cleaned

# mode -> (launch keys, CPUs per task of the launch step on a 48-CPU node, 4 per node)
MODES = {
    "torchrun": ("mode: torchrun", 48),  # one agent per node: every CPU of the node
    "mpirun_torchrun": ("mode: mpirun_torchrun", None),  # no kit srun launches: Open MPI's
    "srun": ("mode: srun", 12),  # one task per GPU: a quarter each
    "horovod": ("mode: horovod", 12),
    "horovod_mpirun": ("mode: horovod, mpi: mpirun", None),
    "accelerate": ("mode: accelerate", 48),
    "deepspeed": ("mode: deepspeed", 48),
    "ray": ("mode: ray", 48),
}


@pytest.fixture
def cluster(tmp_path: Path):
    yield from cleaned(Cluster(tmp_path, "submit_dir"))


def spec_text(launch: str, sbatch: str = "") -> str:
    return f"""\
        job: {{nodes: 2, gpus_per_node: 4{sbatch}}}
        site: jsc
        runtime: {{kind: enroot, image: i.sqsh}}
        launch: {{{launch}, procs_per_node: 4, preflight: true}}
        program: [python3, t.py]
        """


def run_mode(cluster: Cluster, launch: str, sbatch: str = "", **env: str):
    (cluster.dir / "i.sqsh").write_text("squashfs")
    script = cluster.render(spec_text(launch, sbatch))
    done = cluster.run(script, SLURM_JOB_CPUS_PER_NODE="48(x2)", **env)
    return done, script


def check(cluster: Cluster, done, node: int, launch_cpus) -> None:
    assert done.returncode == 0, done.stdout + done.stderr
    sruns = cluster.records("srun")
    # The set-up (enroot create), the doctor, then the launch (unless mpirun starts it).
    assert len(sruns) == (2 if launch_cpus is None else 3), [r["argv"] for r in sruns]
    for r in sruns[:2]:  # one task per node: the node's CPUs
        assert r["cpus"] == node, r["argv"]
    if launch_cpus is not None:
        assert sruns[2]["cpus"] == launch_cpus, sruns[2]["argv"]
        tasks = [t for t in cluster.records() if t["prog"] in ("torchrun_jsc", "ray-node", "accelerate",
                                                              "deepspeed")
                 or t["prog"] == "python3" and "t.py" in t["argv"]]
        assert tasks and all(t["env"]["SLURM_CPUS_PER_TASK"] == str(launch_cpus)
                             for t in tasks)


@pytest.mark.parametrize("mode", sorted(MODES))
def test_every_srun_gets_its_cpus_on_the_command_line(cluster, mode):
    launch, cpus = MODES[mode]
    done, _ = run_mode(cluster, launch)
    check(cluster, done, 48, cpus)


@pytest.mark.parametrize("how", ["env_hint", "env_threads", "spec_hint", "spec_threads"])
@pytest.mark.parametrize("mode", ["torchrun", "srun"])
def test_one_thread_per_core_counts_cores(cluster, mode, how):
    """--hint=nomultithread / --threads-per-core=1: SLURM_JOB_CPUS_PER_NODE counts hardware
    threads, but a step may use one per core: the count is divided by ThreadsPerCore."""
    launch, cpus = MODES[mode]
    env = {"FAKE_THREADS_PER_CORE": "2"}
    sbatch = ""
    if how == "env_hint":
        env["SLURM_HINT"] = "nomultithread"
    elif how == "env_threads":
        env["SLURM_THREADS_PER_CORE"] = "1"
    elif how == "spec_hint":
        sbatch = ", sbatch: {hint: nomultithread}"
    else:
        sbatch = ", sbatch: {threads-per-core: 1}"
    done, script = run_mode(cluster, launch, sbatch, **env)
    check(cluster, done, 24, cpus // 2)


def test_submitit_steps_get_a_share_each(tmp_path, monkeypatch):
    """submitit writes its own srun line (its srun_args are quoted, so a run-time count cannot
    go there): the count travels as SLURM_CPUS_PER_TASK, srun's own input variable."""
    from tests.fakes.test_submitit import BARE, run_submission
    done, records, _, _ = run_submission(tmp_path, monkeypatch, BARE, python="python3")
    assert done.returncode == 0, done.stderr
    (srun,) = [r for r in records if r["prog"] == "srun"]
    assert srun["cpus"] == 24  # 48 CPUs per node, 2 tasks per node
    assert all(r["env"]["SLURM_CPUS_PER_TASK"] == "24" for r in records
               if r["prog"] == "python3")


def test_submitit_one_thread_per_core(tmp_path, monkeypatch):
    from tests.fakes.test_submitit import BARE, run_submission
    monkeypatch.setenv("SLURM_HINT", "nomultithread")
    monkeypatch.setenv("FAKE_THREADS_PER_CORE", "2")
    done, records, _, _ = run_submission(tmp_path, monkeypatch, BARE, python="python3")
    assert done.returncode == 0, done.stderr
    (srun,) = [r for r in records if r["prog"] == "srun"]
    assert srun["cpus"] == 12
