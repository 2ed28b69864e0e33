"""Ring 2 for launch mode ray: the node agent (launcher/task/ray.py, run as the jobs run it:
``python3 KIT/task/run.py ray-node``, from another directory, nothing on PYTHONPATH) with a
fake `ray` and a fake head port, no Ray and no Slurm; the rendered script under the
recording fakes."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from launcher import kit

RUN_PY = kit.installed() / "task" / "run.py"


def agent_env(**env: str) -> dict:
    """This environment without PYTHONPATH: run.py finds the kit beside itself."""
    full = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    full.update(env)
    return full


# --- the agent as a worker, with a fake `ray` and a fake head port (ring 2) ---------------

FAKE_RAY = """\
#!/bin/sh
# Records its argv, then blocks like `ray start --block` until SIGTERM (or exits $FAKE_RC).
echo "$$" > "$FAKE_ARGV.pid"
printf '%s\\n' "$@" > "$FAKE_ARGV"
trap 'echo stopped >> "$FAKE_ARGV"; exit 1' TERM
if [ -n "${FAKE_RC:-}" ]; then exit "$FAKE_RC"; fi
while :; do sleep 0.1; done
"""


def start_worker(tmp_path: Path, port: int, **env: str) -> subprocess.Popen:
    fake = tmp_path / "ray"
    fake.write_text(FAKE_RAY)
    fake.chmod(0o755)
    full = agent_env(SLURMD_NODENAME="localhost", SLURM_NODEID="1", SLURM_JOB_ID="5",
                     SLURM_STEP_NODELIST="localhost", FAKE_ARGV=str(tmp_path / "argv"), **env)
    return subprocess.Popen(
        [sys.executable, str(RUN_PY), "ray-node", f"--head=127.0.0.1:{port}",
         f"--ray={fake}", "--join-timeout=20", f"--temp-dir={tmp_path / 'raytmp'}", "--", "x"],
        cwd=tmp_path, env=full, stderr=subprocess.PIPE, text=True)


def wait_for_file(path: Path, proc: subprocess.Popen) -> str:
    while not (path.exists() and path.read_text()):
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        time.sleep(0.05)  # polls the condition; not a fixed wait
    return path.read_text()


def test_worker_joins_then_stops_when_the_head_closes(tmp_path):
    head = socket.create_server(("127.0.0.1", 0))
    (tmp_path / "raytmp").mkdir()  # what `ray start` would make
    proc = start_worker(tmp_path, head.getsockname()[1])
    argv = wait_for_file(tmp_path / "argv", proc).split("\n")
    assert argv[:2] == ["start", f"--address=127.0.0.1:{head.getsockname()[1]}"]
    assert "--node-ip-address=127.0.0.1" in argv and "--node-name=localhost" in argv
    head.close()  # the head stopped: the worker stops its Ray and ends the task with 0
    assert proc.wait(timeout=30) == 0, proc.stderr.read()
    assert (tmp_path / "argv").read_text().endswith("stopped\n")
    assert not (tmp_path / "raytmp").exists()  # the per-job temp dir is removed on success


def test_worker_fails_when_its_ray_dies_under_a_live_head(tmp_path):
    with socket.create_server(("127.0.0.1", 0)) as head:
        proc = start_worker(tmp_path, head.getsockname()[1], FAKE_RC="1")
        assert proc.wait(timeout=30) == 1
        err = proc.stderr.read()
    assert "ray_node: Ray on localhost exited with 1 while the head is up" in err


def test_worker_sigterm_stops_ray(tmp_path):
    with socket.create_server(("127.0.0.1", 0)) as head:
        proc = start_worker(tmp_path, head.getsockname()[1])
        wait_for_file(tmp_path / "argv", proc)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    # After a signal Slurm kills the step within KillWait: the agent SIGKILLs at once.
    pid = (tmp_path / "argv.pid").read_text().strip()
    assert not Path(f"/proc/{pid}").exists()
    assert "stopped by signal 15" in proc.stderr.read()


def test_worker_gives_up_on_a_head_that_never_opens(tmp_path):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.run(
        [sys.executable, str(RUN_PY), "ray-node", f"--head=127.0.0.1:{port}",
         "--join-timeout=1", "--ray=/bin/false", "--", "x"], cwd=tmp_path,
        env=agent_env(SLURMD_NODENAME="localhost", SLURM_NODEID="1", SLURM_JOB_ID="5"),
        capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[0] == (
        f"ray_node: localhost: the Ray head 127.0.0.1:{port} did not open its port within 1 s")


def test_rendered_script_hands_hostile_values_to_one_agent_per_node(tmp_path):
    """bash runs the rendered script with fakes of srun/apptainer/python3 (tests/fakes): one
    agent per node, the head at the first node's inter-node name, the program byte-identical."""
    from tests.helpers.cluster import HOSTILE, HOSTILE_NL, Cluster

    cluster = Cluster(tmp_path)
    (cluster.dir / "r.sif").write_text("")
    script = cluster.render(f"""\
        job: {{nodes: 2}}
        site: jsc
        runtime: {{kind: apptainer, image: r.sif}}
        launch: {{mode: ray, procs_per_node: 2}}
        program: {json.dumps(["python3", *(a.replace("$", "$$") for a in (HOSTILE_NL, f"--flag={HOSTILE}")), "", "*"])}
        """)
    done = cluster.run(script)
    assert done.returncode == 0, done.stderr
    agents = cluster.records("ray-node")  # python3 KIT/task/run.py ray-node, as fake.py records
    assert len(agents) == 2
    for rec in agents:
        assert rec["run"] == str(RUN_PY)
        assert rec["argv"] == ["--head=jwb0001i:29742", "--suffix=i",
                               "--procs-per-node=2", "--join-timeout=120", "--",
                               "python3", HOSTILE_NL, f"--flag={HOSTILE}", "", "*"]
    assert sorted(r["env"]["SLURM_NODEID"] for r in agents) == ["0", "1"]
    assert not list(tmp_path.rglob("pwned*"))
