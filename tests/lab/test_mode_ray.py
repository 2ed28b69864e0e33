"""Ring 3: launch mode ray on the local cluster (2 nodes x 2 slots): bare (venv), Apptainer,
Enroot and pyxis; Ray Train's TorchTrainer bare (venv).

Each job is rendered by the composer and submitted with sbatch from the repository root. The
driver's summary line is checked (world size, sum, both nodes, each node's inter-node
interface), and after every job, whatever its end, no Ray process may remain on any node:
the lab's nodes share the machine's PID space, so each node's processes are found by their
network namespace (the node's slurmd's), not by `ps` alone. Zombies (state Z) are left out:
they hold nothing but a PID until init reaps them.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

import pytest

from tests.conftest import load_slurmjob
from tests.helpers.labjobs import make

REPO = Path(__file__).resolve().parents[2]
VENV = os.environ.get("VENV", str(REPO / ".venv"))
STATE = Path("/run/torchrun-jsc-cluster")
NODES = ("jwb0001", "jwb0002")
RAY_PROCESS = re.compile(r"raylet|gcs_server|ray::|default_worker|/ray/|task/run\.py ray-node|"
                         r"ray start")
JOB_TIMEOUT_S = 240
GONE_WITHIN_S = 5.0  # after the job left the queue


@pytest.fixture(scope="module")
def slurm():
    """The running lab (never started or restarted here: other jobs may be using it)."""
    p = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, check=False)
    if p.returncode != 0 or not p.stdout.strip():
        pytest.fail(f"the local cluster is not up (sinfo: {p.stderr.strip()}): "
                    "sudo make cluster-up")
    return load_slurmjob()


def node_netns() -> Dict[str, str]:
    out = {}
    for node in NODES:
        pid = (STATE / f"slurmd-{node}.pid").read_text().strip()
        out[node] = os.readlink(f"/proc/{pid}/ns/net")
    return out


def ray_processes() -> Dict[str, List[str]]:
    """node -> 'PID CMDLINE' of every live Ray process in that node's network namespace."""
    netns = {ns: node for node, ns in node_netns().items()}
    found: Dict[str, List[str]] = {node: [] for node in NODES}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            ns = os.readlink(f"/proc/{entry}/ns/net")
            with open(f"/proc/{entry}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except (OSError, IndexError):
            continue
        if ns in netns and state != "Z" and RAY_PROCESS.search(cmd):
            found[netns[ns]].append(f"{entry} {cmd[:200]}")
    return found


def ray_temp_dirs(job_id: str) -> Dict[str, List[str]]:
    """node -> the job's Ray temp dir in that node's own /tmp, if it is still there."""
    found = {}
    for node in NODES:
        path = STATE / "node" / node / "tmp" / f"ray-{job_id}"
        if path.exists():
            found[node] = [f"temp dir {path}"]
    return found


def assert_no_ray_left(job_id: str) -> float:
    """Every node is free of Ray processes (and of the job's temp dir) within GONE_WITHIN_S;
    returns how long it took."""
    start = time.monotonic()
    while True:
        left = {n: p for n, p in ray_processes().items() if p}
        left.update(ray_temp_dirs(job_id))
        if not left:
            return time.monotonic() - start
        if time.monotonic() - start > GONE_WITHIN_S:
            pytest.fail(f"job {job_id}: Ray processes remain {GONE_WITHIN_S} s after the job: "
                        f"{json.dumps(left, indent=1)}")
        time.sleep(0.2)


def write_spec(folder: Path, name: str, program: List[str], extra_launch: str = "",
               command: Optional[List[str]] = None, runtime: str = "") -> Path:
    launch_command = f"  command: {json.dumps(command)}\n" if command else ""
    site = f"site: jsc\nruntime: {runtime}\n" if runtime else \
        f"site:\n  profile: jsc\n  venv: {VENV}\n"
    spec = folder / f"{name}.yaml"
    spec.write_text(f"""\
job:
  name: {name}
  nodes: 2
  time: "00:05:00"
  partition: batch
  output: {folder}/%x-%j.out
  node_output: {folder}/%x-%j.node%n.out
{site}launch:
  mode: ray
  procs_per_node: 2
  object_store_memory: 100000000
{launch_command}{extra_launch}program: {json.dumps(program)}
""")
    job = spec.with_suffix(".job")
    subprocess.run([sys.executable, "-m", "launcher", "render", str(spec), "-o", str(job)],
                   cwd=REPO, check=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    return job


def run(slurm, job: Path, sbatch_args=(), env=None):
    before = {n: p for n, p in ray_processes().items() if p}
    assert not before, f"Ray processes before the job (another job's?): {before}"
    res = slurm.run_job(str(job), list(sbatch_args), timeout=JOB_TIMEOUT_S, cwd=str(REPO),
                        env=env)
    gone = time.monotonic()
    # The per-node logs (node_output) lie beside the spec: the driver's lines are in node 0's.
    for log in sorted(job.parent.glob(f"*-{res.job_id}.node*.out")):
        res.output += f"\n==> {log} <==\n{log.read_text(errors='replace')}"
    took = assert_no_ray_left(res.job_id)
    print(f"{job.name}: job {res.job_id} {res.state} {res.exit_code} submit->done "
          f"{res.elapsed_s:.1f} s; no Ray process on any node {took:.1f} s after")
    return res, gone


def line_of(output: str, prefix: str) -> dict:
    lines = [l for l in output.splitlines() if l.startswith(prefix + " ")]
    assert len(lines) == 1, output[-3000:]
    return json.loads(lines[0].split(" ", 1)[1])


def check_sum(res) -> None:
    """examples/ray_sum.py: distributed_sum's summary from rank 0, then where the actors ran."""
    assert res.state == "COMPLETED", res.output[-3000:]
    s = line_of(res.output, "SUM_SUMMARY")
    assert s["launcher"] == "ray" and s["world_size"] == 4 and s["sum"] == 10 == s["expected"]
    assert s["ok"] is True and s["backend"] == "gloo" and s["hosts"] == list(NODES)
    p = line_of(res.output, "RAY_PLACEMENT")
    assert p == {"nodes": list(NODES), "master_addr": "jwb0001i",
                 "ifnames": ["jwb0001i", "jwb0002i"]}
    assert "all 2 nodes joined the Ray head at jwb0001i:" in res.output


def test_ray_bare_sum(slurm, shared_tmp):
    """Venv, 2 nodes x 2 actors: the gloo sum over Ray actors on both nodes."""
    job = write_spec(shared_tmp, "ray_bare", ["python3", "-u", "examples/ray_sum.py"])
    # A home with ~/.ray/auth_token, as any local ray.init() leaves: `ray start --head` would
    # turn token authentication on and refuse every worker (seen in CI) unless the agent sets
    # one mode for the job.
    home = shared_tmp / "home"
    (home / ".ray").mkdir(parents=True)
    (home / ".ray" / "auth_token").write_text("0123456789abcdef" * 4)
    res, _ = run(slurm, job, env=dict(os.environ, HOME=str(home)))
    check_sum(res)


def lab_addresses() -> Dict[str, str]:
    """name -> address from the lab's private hosts file (the host itself does not resolve
    the nodes' names): jwb0001 is the hostname's address, jwb0001i the inter-node one."""
    out = {}
    for line in (STATE / f"hosts-{NODES[0]}").read_text().splitlines():
        fields = line.split("#", 1)[0].split()
        for name in fields[1:]:
            out[name] = fields[0]
    return out


def test_ray_train_bare_sum(slurm, shared_tmp):
    """Venv, 2 nodes x 2: Ray Train's TorchTrainer (examples/ray_train_sum.py) forms its own
    gloo group at the address Ray advertises for worker 0's node (the inter-node one), sums
    rank + 1, takes one DDP step and stores rank 0's checkpoint on the shared file system."""
    storage = shared_tmp / "ray-train"
    job = write_spec(shared_tmp, "ray_train", ["python3", "-u", "examples/ray_train_sum.py",
                                               f"--storage-path={storage}"])
    res, _ = run(slurm, job)
    assert res.state == "COMPLETED", res.output[-3000:]
    s = line_of(res.output, "SUM_SUMMARY")
    print("ray_train:", json.dumps(s, sort_keys=True))
    assert s["launcher"] == "ray-train" and s["world_size"] == 4 and s["sum"] == 10 == s["expected"]
    assert s["ok"] is True and s["ddp_ok"] is True and s["checkpoint_ok"] is True, s
    assert s["backend"] == "gloo" and s["hosts"] == list(NODES), s
    assert s["ifnames"] == ["jwb0001i", "jwb0002i"], s
    addresses = lab_addresses()
    assert s["master_addr"] in {addresses["jwb0001i"], addresses["jwb0002i"]}, (s, addresses)
    assert storage.is_dir() and not list(storage.iterdir()), "the run's folder stayed"
    assert "all 2 nodes joined the Ray head at jwb0001i:" in res.output


def test_ray_apptainer_sum(slurm, shared_tmp):
    """jobs/sum_ray.job as checked in (Apptainer, launchers.sif), submitted unchanged."""
    launchers_sif()
    res, _ = run(slurm, REPO / "jobs" / "sum_ray.job",
                 ["-o", str(shared_tmp / "sum_ray-%j.out")])
    for log in (REPO / "logs").glob(f"*-{res.job_id}.*"):
        log.unlink()
    check_sum(res)


def launchers_sif() -> Path:
    """launchers.sif, built by the project's own target when missing (the agent itself runs
    from the kit: `python3 "$kit/task/run.py" ray-node`)."""
    sif = REPO / "launchers.sif"
    if not sif.exists():
        make("launchers-image")
    return sif


@pytest.fixture(scope="module")
def launchers_sqsh() -> Path:
    """launchers.sif's root file system as the squashfs Enroot and pyxis start (9 s)."""
    sif, sqsh = launchers_sif(), REPO / "build" / "launchers.sqsh"
    if not sqsh.exists() or sqsh.stat().st_mtime < sif.stat().st_mtime:
        subprocess.run(["bash", "scripts/build-image.sh", "enroot", str(sif), str(sqsh)],
                       cwd=REPO, check=True, capture_output=True)
    return sqsh


@pytest.mark.parametrize("kind", ["enroot", "pyxis"])
def test_ray_enroot_and_pyxis_sum(slurm, shared_tmp, launchers_sqsh, kind):
    """The same sum with the agent inside Enroot (enroot start) and pyxis (srun --container-*)."""
    runtime = f"{{kind: {kind}, image: {launchers_sqsh.relative_to(REPO)}}}"
    job = write_spec(shared_tmp, f"ray_{kind}", ["python3", "-u", "examples/ray_sum.py"],
                     runtime=runtime)
    res, _ = run(slurm, job)
    check_sum(res)


def test_ray_failing_driver(slurm, shared_tmp):
    """The driver's exit status is the job's; Ray stops everywhere."""
    code = "import ray, sys; ray.init(); print('NODES', len(ray.nodes()), flush=True); sys.exit(3)"
    res, _ = run(slurm, write_spec(shared_tmp, "ray_fail", ["python3", "-c", code]))
    assert res.state == "FAILED" and res.exit_code == "3:0", res.output[-3000:]
    assert "NODES 2" in res.output


def test_ray_killed_raylet(slurm, shared_tmp):
    """A raylet SIGKILLed on the second node ends the job non-zero within seconds."""
    job = write_spec(shared_tmp, "ray_kill",
                     ["python3", "-u", "tests/helpers/programs/ray_kill_raylet.py"])
    res, gone = run(slurm, job)
    assert res.state == "FAILED", res.output[-3000:]
    # The driver's line, printed just before the kill (the task's own line is forwarded
    # through the dying node's log monitor, so it may never arrive).
    killed = float(re.search(r"KILL_RAYLET_ON jwb0002 at ([\d.]+)", res.output)[1])
    ended = time.time() - (time.monotonic() - gone)
    print(f"raylet killed -> job gone: {ended - killed:.1f} s")
    assert ended - killed < 15, ended - killed
    assert "ray_node: Ray on jwb0002 exited with 1 while the head is up" in res.output


def test_ray_node_missing(slurm, shared_tmp):
    """A node whose agent never starts Ray: one line naming it after launch.join_timeout."""
    hold = ('if [ "$$SLURM_NODEID" = 1 ]; then exec sleep 300; fi; '
            f'exec python3 {REPO}/launcher/task/run.py ray-node "$@"')
    job = write_spec(shared_tmp, "ray_missing", ["python3", "-c", "print('DRIVER RAN')"],
                     "  join_timeout: 10\n", command=["bash", "-c", hold, "agent"])
    res, _ = run(slurm, job)
    assert res.state == "FAILED", res.output[-3000:]
    assert re.search(r"ray_node: 1 of 2 nodes did not join the Ray head at jwb0001i:\d+ within "
                     r"10 s: jwb0002\n", res.output), res.output[-3000:]
    assert "DRIVER RAN" not in res.output


def test_ray_scancel(slurm, shared_tmp):
    """scancel while the driver runs: the job ends and Ray stops on every node."""
    code = "import time; print('DRIVER UP', flush=True); time.sleep(300)"
    job = write_spec(shared_tmp, "ray_cancel", ["python3", "-c", code])
    job_id = slurm.submit(str(job), cwd=str(REPO))
    log = shared_tmp / f"ray_cancel-{job_id}.node0.out"
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while not (log.exists() and "DRIVER UP" in log.read_text()):
        assert time.monotonic() < deadline, f"job {job_id}: the driver never started"
        time.sleep(0.2)
    subprocess.run(["scancel", job_id], check=True)
    slurm.wait_gone(job_id, 60)
    took = assert_no_ray_left(job_id)
    info = slurm.job_info(job_id)
    print(f"scancel: job {job_id} {info.get('JobState')}; no Ray process {took:.1f} s after")
    assert info.get("JobState") == "CANCELLED"
