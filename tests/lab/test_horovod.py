"""Ring 3: the checked-in Horovod jobscripts (horovod.sif, Open MPI) on the local cluster.

jobs/horovod_container.job (srun --mpi=pmix, one rank per GPU) and jobs/horovod_mpirun.job
(mpirun inside the allocation): 2 nodes x 2 ranks (one per core of the lab's nodes), Horovod allreduce and one
DistributedOptimizer step over the inter-node names (the image's horovod_check.py).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.helpers.labjobs import make

REPO = Path(__file__).resolve().parents[2]
JOB_TIMEOUT_S = 300


@pytest.fixture(scope="module")
def horovod_image() -> Path:
    make("horovod-image")
    return REPO / "horovod.sif"


@pytest.mark.parametrize("name", ["horovod_container", "horovod_mpirun"])
def test_horovod_job(cluster, horovod_image, shared_tmp, name):
    job = REPO / "jobs" / f"{name}.job"
    # The lab's nodes share this machine's cores, so srun binds rank 0 of BOTH nodes to core 0.
    # Open MPI busy-polls: in MPI_Comm_dup (Horovod's init) the spinning rank starved its
    # peer on the same core and the job hung in about one run of two. Real nodes do not share
    # cores; here the ranks float (mpirun's path already runs with --bind-to none).
    env = dict(os.environ, SLURM_CPU_BIND="none")
    res = cluster.run_job(str(job), ["-o", str(shared_tmp / f"{name}-%j.out")],
                          timeout=JOB_TIMEOUT_S, cwd=str(REPO), env=env)
    for log in (REPO / "logs").glob(f"*-{res.job_id}.*"):
        log.unlink()
    print(f"{job.name}: job {res.job_id} {res.state} submit->done {res.elapsed_s:.1f} s")
    assert res.state == "COMPLETED", res.output
    size = int(res.info["NumTasks"])
    per_node = re.search(r"^#SBATCH --ntasks-per-node=(\d+)$", job.read_text(), re.M)
    assert per_node and size == 2 * int(per_node.group(1))  # 2 nodes x one rank per GPU
    ok = re.findall(r"HOROVOD_OK size=(\d+) sum=(\d+) controller=(\w+) params_identical=True",
                    res.output)
    assert ok == [(str(size), str(size * (size + 1) // 2), "mpi")], res.output
    assert "HOROVOD_FAIL" not in res.output


def test_horovod_under_pyxis(cluster, horovod_image, shared_tmp):
    """jobs/horovod_container.yaml with runtime pyxis and the same root filesystem as a
    squashfs: srun --mpi=pmix starts each rank in pyxis' container (Enroot's PMI hook brings
    the step's PMIx in), the task script picks the interface with the image's python3."""
    import yaml

    from launcher.render.jobscript import render_jobscript
    from launcher.spec import parse_spec

    make("horovod-enroot-image", timeout=1200)
    spec = yaml.safe_load((REPO / "jobs/horovod_container.yaml").read_text())
    spec["runtime"] = {"kind": "pyxis", "image": str(REPO / "horovod.sqsh")}
    spec["job"]["node_output"] = None
    job = shared_tmp / "horovod_pyxis.job"
    job.write_text(render_jobscript(parse_spec(yaml.safe_dump(spec), "horovod_pyxis.yaml")))
    env = dict(os.environ, SLURM_CPU_BIND="none")  # see test_horovod_job
    res = cluster.run_job(str(job), ["-o", str(shared_tmp / "horovod_pyxis-%j.out")],
                          timeout=JOB_TIMEOUT_S, cwd=str(shared_tmp), env=env)
    print(f"horovod under pyxis: job {res.job_id} {res.state} submit->done {res.elapsed_s:.1f} s")
    assert res.state == "COMPLETED", res.output
    ok = re.findall(r"HOROVOD_OK size=(\d+) sum=(\d+) controller=(\w+) params_identical=True",
                    res.output)
    assert ok == [("4", "10", "mpi")], res.output
    assert "can't honor --ntasks-per-node" not in res.output  # the set-up runs once per node
