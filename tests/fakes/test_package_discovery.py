"""Ring 2: `pip install .` finishes in seconds whatever build/ holds, and ships every file of
launcher/. After an arm64 image build, build/ holds a Debian root filesystem (its
`usr/bin/X11 -> .` loop) and torch venvs (22 GB on the lab VM); setuptools' namespace
discovery walked all of it with symlinks followed, and `pip install .` (the README's install
step, tests/lab/test_venv.py in a job) never finished. Here a copy of the project gets such a
build/: self-loops that make a symlink-following walk exponential, a merged-/usr link and a
large tree; the install runs under a timeout (seconds when discovery stays in launcher/,
forever otherwise), and the installed files are exactly launcher/'s .py files plus the shell
files the jobscripts call by path."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def plant_build(build: Path) -> None:
    rootfs = build / "rootfs" / "bookworm-arm64"
    (rootfs / "usr" / "bin").mkdir(parents=True)
    (rootfs / "usr" / "bin" / "X11").symlink_to(".")       # Debian's own loop
    (rootfs / "usr" / "bin" / "X11-again").symlink_to(".")  # two loops: 2^40 paths to walk
    (rootfs / "bin").symlink_to("usr/bin")                   # merged /usr
    for venv in range(20):  # torch-compat venvs: many directories, python files in them
        for pkg in range(100):
            d = build / "torch-compat" / f"venv{venv}" / "lib" / "site-packages" / f"pkg{pkg}"
            d.mkdir(parents=True)
            (d / "__init__.py").write_text("")
        (build / "torch-compat" / f"venv{venv}" / "lib64").symlink_to("lib")


def source_files(src: Path) -> set[str]:
    return {str(p.relative_to(src)) for p in (src / "launcher").rglob("*")
            if p.is_file() and "__pycache__" not in p.parts}


def test_install_ignores_build_and_ships_all_of_launcher(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, src / name)
    shutil.copytree(ROOT / "launcher", src / "launcher",
                    ignore=shutil.ignore_patterns("__pycache__"))
    plant_build(src / "build")
    target = tmp_path / "target"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    # Its own session: on a timeout pip's build backend (a grandchild) is stopped too.
    pip = subprocess.Popen(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
         "--no-index", "--target", str(target), str(src)],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True)
    try:
        out, _ = pip.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(pip.pid, signal.SIGKILL)
        pip.communicate()
        pytest.fail("pip install . did not finish in 120 s with a symlink loop in build/: "
                    "package discovery walks build/ (pyproject.toml [tool.setuptools.packages.find])")
    assert pip.returncode == 0, out[-3000:]
    installed = {str(p.relative_to(target)) for p in (target / "launcher").rglob("*")
                 if p.is_file() and "__pycache__" not in p.parts}
    expected = source_files(src)
    assert installed == expected, (sorted(expected - installed), sorted(installed - expected))
    # The shell files the jobscripts call by path are among them (package data).
    assert {"launcher/node/job.sh", "launcher/task/hook.sh"} <= installed
    assert not (target / "build").exists() and not (target / "rootfs").exists()
    # The program's API at the top level as well, for programs run outside a kit job.
    api = {str(p.relative_to(target / "torchrun_jsc_kit")) for p in
           (target / "torchrun_jsc_kit").glob("*.py")}
    assert api == {p.name for p in (src / "launcher/task/hook/torchrun_jsc_kit").glob("*.py")}
    assert sorted(p.name for p in target.iterdir() if not p.name.endswith(".dist-info")) == \
        ["bin", "launcher", "torchrun_jsc_kit"]
