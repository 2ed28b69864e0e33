"""Ring 2: code the kit runs on the nodes is not replaced by files in the user's submit directory
or on the user's (or the image's) PYTHONPATH.

Jobs run in the submit directory, where users keep their own modules, and often with a
PYTHONPATH of their own: a user's json.py or socket.py there would be imported instead of the
standard library's. The kit's node-side entry runs isolated (``python3 -I KIT/node/run.py``:
the doctor's node half, the task scripts' interface step in launcher/node/task.sh); both
entries load the kit's package by its path, so a user's ``launcher`` module is never imported
in its place, and the Ray agent (``python3 KIT/task/run.py ray-node``, not isolated: the
image's paths to ray hold) is the kit's whatever the submit directory holds.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from launcher import kit

SHADOWS = ("json", "socket", "argparse", "os", "subprocess", "ipaddress", "launcher")
NODE_RUN = str(kit.installed() / "node" / "run.py")
TASK_RUN = str(kit.installed() / "task" / "run.py")
TASK_SH = str(kit.installed() / "node" / "task.sh")


@pytest.fixture
def submit_dir(tmp_path: Path) -> Path:
    for name in SHADOWS:
        (tmp_path / f"{name}.py").write_text(
            f"open('shadowed-{name}', 'w'); raise SystemExit(\"SHADOWED by the user's "
            f"{name}.py\")\n")
    return tmp_path


def shadowed(where: Path) -> list:
    return sorted(p.name for p in where.glob("shadowed-*"))


def test_doctor_entry_ignores_the_submit_directory_and_pythonpath(submit_dir: Path):
    """The collector (``doctor table``), its reports on stdin (none here: one row without a
    report), from the submit directory with the user's files also on PYTHONPATH."""
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(submit_dir)}
    argv = [NODE_RUN, "doctor", "table", "{}", "n1i", "29400", "n1"]
    p = subprocess.run([sys.executable, "-I", *argv], cwd=submit_dir, env=env, input="",
                       capture_output=True, text=True, timeout=60, check=False)
    assert "SHADOWED" not in p.stdout + p.stderr and not shadowed(submit_dir)
    assert p.returncode == 1 and p.stdout.splitlines()[-1] == "doctor: 1 check failed on 1 node", \
        p.stdout + p.stderr
    # and the same call without -I is what the user's files would have broken:
    q = subprocess.run([sys.executable, *argv], cwd=submit_dir, env=env, input="",
                       capture_output=True, text=True, timeout=60, check=False)
    assert "SHADOWED" in q.stdout + q.stderr and shadowed(submit_dir)


def test_interface_step_ignores_the_submit_directory_and_pythonpath(submit_dir: Path):
    """``bash KIT/node/task.sh ifname ARGV`` (the task script): the interface towards
    MASTER_ADDR picked by the kit's rule, then ARGV."""
    env = {"PATH": "/usr/bin:/bin", "MASTER_ADDR": "127.0.0.1", "PYTHONPATH": str(submit_dir)}
    p = subprocess.run(["bash", TASK_SH, "ifname", "sh", "-c", 'echo "IFNAME=$GLOO_SOCKET_IFNAME"'],
                       cwd=submit_dir, capture_output=True, text=True, timeout=60, env=env,
                       check=False)
    assert "SHADOWED" not in p.stdout + p.stderr and not shadowed(submit_dir)
    assert p.returncode == 0 and p.stdout == "IFNAME=lo\n", p.stdout + p.stderr


def test_a_launcher_module_of_the_user_does_not_replace_the_ray_agent(submit_dir: Path,
                                                                      tmp_path: Path):
    """The agent runs from the kit with a ``launcher.py`` in the submit directory and a
    ``launcher`` package first on PYTHONPATH (e.g. the image's unrelated one)."""
    own = tmp_path / "image-path" / "launcher"
    own.mkdir(parents=True)
    (own / "__init__.py").write_text(f"open({str(submit_dir / 'shadowed-pkg')!r}, 'w')\n"
                                     "raise SystemExit('SHADOWED by the image launcher')\n")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(own.parent)}
    # The trap the entry avoids: the image's own `launcher` is what `import launcher` finds.
    trap = subprocess.run([sys.executable, "-c", "import launcher"], cwd="/", env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert "SHADOWED by the image launcher" in trap.stderr
    assert shadowed(submit_dir) == ["shadowed-pkg"]
    (submit_dir / "shadowed-pkg").unlink()
    done = subprocess.run([sys.executable, TASK_RUN, "ray-node", "--help"], cwd=submit_dir,
                          env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "SHADOWED" not in done.stdout + done.stderr and not shadowed(submit_dir)
    assert "--head HOST:PORT" in done.stdout and "--procs-per-node" in done.stdout
