"""Ring 3: `python -m launcher submit` on the local Slurm cluster with hostile values.

Real sbatch reads the #SBATCH lines (job name quoting), real srun starts one task per
"GPU" on two nodes, and each task records what it received: the job name, env values and
program arguments must arrive byte-identical, per-task variables must differ per task, and
the socket interface each task picked must be its node's inter-node (`i`) interface.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
HOSTILE = "sp ace 'sq' \"dq\" ;semi $(touch pwned-by-jobname) `id` \\bs ü日本 #hash %x"
HOSTILE_NAME = HOSTILE.replace("\\", "")  # Slurm cannot put a backslash in file names
RECORD = """\
import json, os, sys
out = sys.argv[1]
keys = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "NODE_RANK", "SLURM_PROCID", "SLURM_NODEID",
        "SLURM_JOB_NAME", "SLURMD_NODENAME", "GLOO_SOCKET_IFNAME", "HOSTILE", "MASTER_ADDR")
data = {"argv": sys.argv[2:], "env": {k: os.environ.get(k) for k in keys}}
with open(os.path.join(out, "rank-%s.json" % os.environ["RANK"]), "w") as f:
    json.dump(data, f)
"""


def test_submit_hostile_values_real_slurm(cluster, shared_tmp: Path):
    out = shared_tmp / "records"
    out.mkdir()
    args = [HOSTILE + "\nline two", "--x=" + HOSTILE, "", "*"]
    spec = {
        "job": {"nodes": 2, "name": HOSTILE_NAME, "time": "5", "partition": "batch",
                "gpus_per_node": 2},
        "site": "jsc",
        # '$$' writes a literal '$' (a lone '$' is refused: env values are never expanded).
        "env": {"set": {"HOSTILE": (HOSTILE + "\n$(id)").replace("$", "$$")}},
        "launch": {"mode": "srun"},
        "program": [sys.executable, "-c", RECORD, str(out), *args],
    }
    (shared_tmp / "hostile.yaml").write_text(yaml.safe_dump(spec, allow_unicode=True))
    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, "-m", "launcher", "submit", "hostile.yaml"],
                          cwd=shared_tmp, env=env, capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip()
    cluster.wait_gone(job_id, 180)
    info = cluster.job_info(job_id)
    logs = "\n".join(p.read_text(errors="replace") for p in shared_tmp.rglob("*.out"))
    assert info.get("JobState") == "COMPLETED", logs
    records = [json.loads(p.read_text()) for p in sorted(out.glob("rank-*.json"))]
    assert sorted(int(r["env"]["RANK"]) for r in records) == [0, 1, 2, 3], logs
    for rec in records:
        env_ = rec["env"]
        assert rec["argv"] == args
        assert env_["SLURM_JOB_NAME"] == HOSTILE_NAME
        assert env_["HOSTILE"] == HOSTILE + "\n$(id)"
        assert env_["RANK"] == env_["SLURM_PROCID"] and env_["NODE_RANK"] == env_["SLURM_NODEID"]
        assert env_["WORLD_SIZE"] == "4" and env_["MASTER_ADDR"] == "jwb0001i"
        assert env_["GLOO_SOCKET_IFNAME"] == env_["SLURMD_NODENAME"] + "i"
    assert {r["env"]["SLURM_NODEID"] for r in records} == {"0", "1"}
    assert not list(shared_tmp.rglob("pwned*")) and not Path("pwned-by-jobname").exists()
