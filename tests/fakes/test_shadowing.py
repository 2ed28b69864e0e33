"""Ring 2: code the kit runs on the nodes is not replaced by files in the user's submit directory.

Jobs run in the submit directory, where users keep their own modules; `python3 -c`/`python3 -`
put that directory first on sys.path, so a user's json.py or socket.py would be imported instead
of the standard library's. The doctor's node half and the task scripts' interface step run
isolated (`python3 -I`); the Ray agent drops the directory itself (tests/fakes/test_spec_values.py).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from launcher.doctor.ship import PYTHON_ISOLATED, node_script
from launcher.modes.common import socket_env_script

SHADOWS = ("json", "socket", "argparse", "os", "subprocess", "ipaddress", "launcher")


@pytest.fixture
def submit_dir(tmp_path: Path) -> Path:
    for name in SHADOWS:
        (tmp_path / f"{name}.py").write_text(f'raise SystemExit("SHADOWED by the user\'s {name}.py")\n')
    return tmp_path


def test_doctor_node_script_ignores_the_submit_directory(submit_dir: Path):
    p = subprocess.run([*PYTHON_ISOLATED, node_script(), "bogus"], cwd=submit_dir,
                       capture_output=True, text=True, timeout=60)
    assert "SHADOWED" not in p.stdout + p.stderr
    # and the same call without -I is what the user's files would have broken:
    q = subprocess.run(["python3", "-c", node_script(), "bogus"], cwd=submit_dir,
                       capture_output=True, text=True, timeout=60)
    assert "SHADOWED" in q.stdout + q.stderr


def test_interface_step_ignores_the_submit_directory(submit_dir: Path):
    script = socket_env_script() + 'echo "IFNAME=$GLOO_SOCKET_IFNAME"\n'
    p = subprocess.run(["bash", "-c", script], cwd=submit_dir, capture_output=True, text=True,
                       timeout=60, env={"PATH": "/usr/bin:/bin", "MASTER_ADDR": "127.0.0.1"})
    assert "SHADOWED" not in p.stdout + p.stderr
    assert p.returncode == 0 and "IFNAME=lo" in p.stdout, p.stdout + p.stderr
