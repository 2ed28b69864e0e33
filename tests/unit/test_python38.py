"""Ring 1: the kit under a real Python 3.8, the oldest the images (NGC 21.xx-22.xx, torch
1.9-1.13) and the login nodes may have: every task-side module imports, torchrun_jsc's signal
list and the program's API (torchrun_jsc_kit) work, and the composer renders every jobs/*.yaml
byte for byte as the goldens (PyYAML's pure-Python half, linked in). A 3.9+ call such as
``str.removeprefix`` fails here, not in a user's job (issue 34). The hook's signal hold under
3.8: tests/fakes/test_stop_signal.py."""

from __future__ import annotations

import glob
import subprocess
from pathlib import Path

from tests.helpers import need

REPO = Path(__file__).resolve().parents[2]


def python38() -> str:
    return need.pyenv_python("3.8")


def run38(code: str, tmp_path: Path) -> str:
    import yaml

    (tmp_path / "yaml").symlink_to(Path(yaml.__file__).parent)  # the C half is 3.11's: unused
    p = subprocess.run([python38(), "-c", code], capture_output=True, text=True, timeout=120,
                       cwd=REPO, env={"PATH": "/usr/bin:/bin",
                                      "PYTHONPATH": f"{REPO}:{tmp_path}"}, check=False)
    assert p.returncode == 0, p.stderr
    return p.stdout


TASK_SIDE = r'''
import importlib, pkgutil, signal, sys
assert sys.version_info[:2] == (3, 8), sys.version
import launcher.task as task
skip = ("__main__", ".run", "sitecustomize")  # importing these runs them
for m in pkgutil.walk_packages(task.__path__, "launcher.task."):
    if not m.name.endswith(skip):
        importlib.import_module(m.name)
from launcher.task.torchrun_jsc import forward
print(forward.parse("SIGUSR1, usr2"))
sys.path.insert(0, "launcher/task/hook")
import torchrun_jsc_kit as kit
stop = kit.StopRequest({"REQUEUE_SIGNAL": "SIGUSR1", "REQUEUE_MARKER": "/nonexistent/m"})
print(stop.signal.name, signal.getsignal(signal.SIGUSR1) == stop._handle, kit.progress())
'''


def test_task_side_under_python38(tmp_path):
    out = run38(TASK_SIDE, tmp_path).splitlines()
    assert out == ["(<Signals.SIGUSR1: 10>, <Signals.SIGUSR2: 12>)", "SIGUSR1 True None"], out


COMPOSER = r'''
import glob, os, sys, tempfile
from launcher import cli
out = tempfile.mkdtemp()
for spec in sorted(glob.glob("jobs/*.yaml")):
    job = os.path.join(out, os.path.basename(spec)[:-5] + ".job")
    assert cli.main(["render", spec, "-o", job]) == 0, spec
    with open(job, "rb") as a, open(spec[:-5] + ".job", "rb") as b:
        print(spec, "same" if a.read() == b.read() else "DIFFERS")
'''


def test_composer_renders_the_goldens_under_python38(tmp_path):
    lines = run38(COMPOSER, tmp_path).splitlines()
    assert len(lines) == len(glob.glob(str(REPO / "jobs/*.yaml"))) > 10, lines
    assert all(line.endswith(" same") for line in lines), lines
