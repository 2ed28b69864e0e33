"""Ring 3: examples/ddp_train.py as real Slurm jobs on the local JSC-like cluster (venv torch).

The jobscripts here are written by the tests (not rendered by the composer), so they pin down
the cluster and the launcher independently of jobs/*.job (see test_e2e_jobs.py for those):
2 nodes x 2 processes, one launcher per node, rendezvous at jwb0001i.
  - torchrun_jsc passes with the right summary; plain torchrun fails (the JSC bug is real here);
  - the training's traffic crosses the fabric (the `i` interfaces' byte counters), not the
    management network that the hostnames resolve to; stock torchrun that rendezvouses by
    hostname gets past the rendezvous over the management network, then fails at Debian's
    127.0.1.1 (the lab's default hosts) or trains over the management network (plain hosts);
  - one srun task per rank with env:// works too;
  - a rank that dies mid-run ends the whole job non-zero within seconds, nothing left running;
  - a job restarted after a crash resumes from the last checkpoint.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.helpers import labnet
from tests.helpers.labjobs import assert_ended_within

REPO = Path(__file__).resolve().parents[2]
STATE = Path("/run/torchrun-jsc-cluster")
VENV = Path(os.environ.get("VENV", REPO / ".venv"))
JOB_TIMEOUT_S = 240

HEADER = f"""#!/bin/bash
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=4
#SBATCH --time=00:05:00
set -euo pipefail
source {VENV}/bin/activate
export PYTHONWARNINGS=ignore
head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)
port=$((29400 + SLURM_JOB_ID % 500))
"""

# LAUNCHER is torchrun_jsc or torchrun; read_timeout makes the broken case fail fast.
PER_NODE_JOB = HEADER + """
srun --kill-on-bad-exit=1 --ntasks-per-node=1 {launcher} --nnodes=2 --nproc_per_node=2 \\
    --rdzv_backend=c10d --rdzv_endpoint="${{head}}i:$port" --rdzv_id="$SLURM_JOB_ID" \\
    --max_restarts=0 --rdzv_conf=read_timeout=10 examples/ddp_train.py {args}
"""

# One srun task per rank; each task names its node's inter-node interface for gloo.
PER_TASK_JOB = HEADER.replace("--ntasks-per-node=1", "--ntasks-per-node=2") + """
export MASTER_ADDR="${{head}}i" MASTER_PORT="$port"
srun --kill-on-bad-exit=1 bash -c \\
    'export GLOO_SOCKET_IFNAME="$(hostname)i"; exec python examples/ddp_train.py "$@"' _ {args}
"""


# The traffic job: 2 nodes x 1 process, 8 all_reduce calls of 4 MiB each
# (tests/helpers/programs/allreduce_volume.py), rendezvous at ENDPOINT.
VOLUME_JOB = HEADER + """
srun --kill-on-bad-exit=1 --ntasks-per-node=1 {launcher} --nnodes=2 --nproc_per_node=1 \\
    --rdzv_backend=c10d --rdzv_endpoint="{endpoint}:$port" --rdzv_id="$SLURM_JOB_ID" \\
    --max_restarts=0 --rdzv_conf=read_timeout=10 tests/helpers/programs/allreduce_volume.py
"""
VOLUME_MIB = 2 * 8 * 4  # what each node sends plus receives, at least (a ring of two ranks)


def submit(cluster, shared_tmp: Path, name: str, text: str):
    job = shared_tmp / f"{name}.job"
    job.write_text(text)
    res = cluster.run_job(str(job), ["-o", str(shared_tmp / f"{name}-%j.out"), "-J", name],
                          timeout=JOB_TIMEOUT_S, cwd=str(REPO))
    print(f"{name}: job {res.job_id} {res.state} submit->done {res.elapsed_s:.1f} s")
    return res


def assert_good(cluster, res, world_size: int = 4):
    assert res.state == "COMPLETED", res.output
    [summary] = res.summaries
    assert cluster.check_summary(summary, world_size) == [], summary
    assert summary["hosts"] == ["jwb0001", "jwb0002"], summary
    return summary


def leftover_ranks() -> list[str]:
    """ddp_train.py processes still alive in any node namespace."""
    found = []
    for ns in ("jwb0001", "jwb0002"):
        pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True,
                              timeout=10, check=False).stdout.split()
        for pid in pids:
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if "ddp_train.py" in cmd:
                found.append(f"{ns}:{pid}:{cmd}")
    return found


def test_torchrun_jsc_job_passes(cluster, shared_tmp):
    res = submit(cluster, shared_tmp, "jsc", PER_NODE_JOB.format(launcher="torchrun_jsc",
                                                                args="--steps 20"))
    summary = assert_good(cluster, res)
    assert summary["steps"] == 20 and summary["resumed_from_step"] == 0


def test_torchrun_jsc_traffic_crosses_the_fabric(cluster, shared_tmp):
    """The training's bytes go over the `i` interfaces (the fabric), not over eth0 (the
    management network, which the hostnames resolve to and Slurm uses)."""
    before = labnet.counters(["jwb0001", "jwb0002"])
    res = submit(cluster, shared_tmp, "volume", VOLUME_JOB.format(launcher="torchrun_jsc",
                                                                  endpoint="${head}i"))
    carried = labnet.since(before)
    print(f"bytes per network: {carried}")
    assert res.state == "COMPLETED" and res.output.count("VOLUME_OK") == 2, res.output
    for node, nets in carried.items():
        assert nets["fabric"] >= VOLUME_MIB << 20, (node, carried)
        # Slurm's own messages for the job (launch, output, pings) are KiB, not MiB
        assert nets["management"] < nets["fabric"] / 20, (node, carried)


def test_plain_torchrun_by_hostname(cluster, shared_tmp):
    """Stock torchrun with the rendezvous at the hostname (jwb0001), as torch's documentation
    shows it: the hostname is the management network, which works, slowly. The rendezvous
    passes over it; then gloo, without GLOO_SOCKET_IFNAME, binds the first address of the
    node's own name. With Debian's /etc/hosts (the lab's default) that is 127.0.1.1: each rank
    publishes a loopback address and the other node's rank is refused. With a site's plain
    hosts or DNS (JSC; JWB_CLUSTER_HOSTS=plain) it is the management address: the job works,
    and every byte of its training crosses the management network instead of the fabric."""
    debian = "127.0.1.1 jwb0001" in (STATE / "hosts-jwb0001").read_text()
    before = labnet.counters(["jwb0001", "jwb0002"])
    res = submit(cluster, shared_tmp, "plainhost", VOLUME_JOB.format(launcher="torchrun",
                                                                     endpoint="${head}"))
    carried = labnet.since(before)
    print(f"bytes per network: {carried}")
    if debian:
        assert res.state == "FAILED" and "VOLUME_OK" not in res.output, res.output
        # a worker's gloo failed: the rendezvous (over the management network) had passed
        assert "Gloo connectFullMesh failed" in res.output, res.output
        assert "remote=[127.0.1.1]" in res.output, res.output
        assert leftover_ranks() == []
        return
    assert res.state == "COMPLETED" and res.output.count("VOLUME_OK") == 2, res.output
    for node, nets in carried.items():
        assert nets["management"] >= VOLUME_MIB << 20, (node, carried)
        assert nets["fabric"] < nets["management"] / 20, (node, carried)


def test_plain_torchrun_job_fails(cluster, shared_tmp):
    """Same job, stock torchrun: no node believes it hosts the store at jwb0001i -> job fails."""
    res = submit(cluster, shared_tmp, "plain", PER_NODE_JOB.format(launcher="torchrun",
                                                                  args="--steps 20"))
    assert res.state == "FAILED", res.output
    assert res.summaries == []
    assert "RendezvousConnectionError" in res.output or "RendezvousTimeoutError" in res.output
    assert leftover_ranks() == []


def test_srun_task_per_rank_env_init(cluster, shared_tmp):
    res = submit(cluster, shared_tmp, "pertask", PER_TASK_JOB.format(args="--steps 20"))
    assert_good(cluster, res)


def test_killed_rank_ends_job_within_seconds(cluster, shared_tmp):
    """Rank 3 (second node) exits 3 at step 5: the whole job must end non-zero, quickly."""
    res = submit(cluster, shared_tmp, "crash", PER_NODE_JOB.format(
        launcher="torchrun_jsc", args="--steps 400 --crash-rank 3 --crash-step 5"))
    assert res.state == "FAILED", res.output
    assert res.summaries == []
    assert_ended_within(res, r"rank 3: crashing on purpose at step 5 at unix time ([0-9.]+)",
                        "crash", 15)
    assert leftover_ranks() == []


def test_restarted_job_resumes_from_checkpoint(cluster, shared_tmp):
    ckpt = shared_tmp / "ckpt"
    crash = PER_NODE_JOB.format(launcher="torchrun_jsc", args=(
        f"--steps 40 --checkpoint-dir {ckpt} --checkpoint-every 10 --crash-rank 1 --crash-step 25"))
    first = submit(cluster, shared_tmp, "resume1", crash)
    assert first.state == "FAILED", first.output
    assert (ckpt / "checkpoint.pt").is_file()
    assert not list(ckpt.glob("*.tmp.*")), "a half-written checkpoint was left behind"

    again = PER_NODE_JOB.format(launcher="torchrun_jsc",
                                args=f"--steps 40 --checkpoint-dir {ckpt} --checkpoint-every 10")
    summary = assert_good(cluster, submit(cluster, shared_tmp, "resume2", again))
    assert summary["resumed_from_step"] == 20, summary
    assert summary["steps"] == 40 and summary["steps_run"] == 20, summary
