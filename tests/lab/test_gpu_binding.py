"""Ring 3: every rank of a one-task-per-GPU step uses its own GPU, under Slurm's real GRES
binding (the lab's fake GPUs), with the kit's srun line as rendered.

The contract (docs/guide/launch-modes.md, GPU placement): a task that sees several GPUs uses
cuda:LOCAL_RANK, a task that sees one uses cuda:0. Stock Slurm shows every task all of the
node's GPUs; a per-task binding (psslurm's default, --gpu-bind=per_task:1 on stock Slurm) shows
each task one. Either way the ranks of a node must land on distinct GPUs, each on CPUs of its
own: srun mode, 2 nodes x 2 tasks, 2 GPUs per node, bare runtime (the project venv).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
VENV = os.environ.get("VENV", str(REPO / ".venv"))


def run(cluster, shared_tmp: Path, name: str, sbatch: dict):
    spec = shared_tmp / f"{name}.yaml"
    spec.write_text(yaml.safe_dump({
        "job": {"nodes": 2, "name": name, "time": "00:05:00", "gpus_per_node": 2,
                "node_output": None, "sbatch": sbatch},
        "site": {"profile": "jsc", "venv": VENV}, "runtime": {"kind": "bare"},
        "launch": {"mode": "srun", "procs_per_node": 2, "preflight": False},
        "program": ["python3", "-u", "tests/helpers/programs/gpu_seen.py"]}))
    from launcher.render.jobscript import render_jobscript
    from launcher.spec import load_spec
    job = shared_tmp / f"{name}.job"
    text = render_jobscript(load_spec(str(spec)))
    assert "--distribution=block:block" in text
    job.write_text(text)
    res = cluster.run_job(str(job), ["-o", str(shared_tmp / f"{name}-%j.out")], timeout=300,
                          cwd=str(REPO))
    assert res.state == "COMPLETED", res.output
    print(f"{name}: job {res.job_id} {res.state}")
    return [json.loads(line.split("GPU_SEEN ", 1)[1]) for line in res.output.splitlines()
            if "GPU_SEEN " in line]


@pytest.mark.parametrize("binding, sbatch, seen", [
    ("stock", {}, [["0", "1"], ["0", "1"]]),  # every task sees the node's GPUs
    ("per-task", {"gpu-bind": "per_task:1"}, [["0"], ["1"]]),  # one GPU each, as psslurm
])
def test_each_rank_of_a_node_gets_its_own_gpu(cluster, shared_tmp, binding, sbatch, seen):
    rows = run(cluster, shared_tmp, f"gpu-{binding}", sbatch)
    print(*rows, sep="\n")
    assert sorted(r["host"] for r in rows) == ["jwb0001"] * 2 + ["jwb0002"] * 2, rows
    for host in ("jwb0001", "jwb0002"):
        mine = sorted((r for r in rows if r["host"] == host), key=lambda r: r["local_rank"])
        assert [r["visible"] for r in mine] == seen, rows
        assert [r["gpu"] for r in mine] == ["0", "1"], rows  # distinct: its own GPU each
        assert not set(mine[0]["cpus"]) & set(mine[1]["cpus"]), rows  # and CPUs of its own
