"""Ring 2: make targets on a fresh clone (no venv) fail, if they must, with one line naming
the cause and what to run first. A copy of the repository in a temp dir, small stubs of
python3/apptainer on PATH; nothing is built or downloaded.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.srccopy import copy_sources

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def clone(tmp_path) -> Path:
    dst = tmp_path / "repo"
    copy_sources(dst)
    return dst


def stub(bindir: Path, name: str, body: str) -> None:
    bindir.mkdir(parents=True, exist_ok=True)
    path = bindir / name
    path.write_text(f"#!/bin/bash\n{body}\n")
    path.chmod(0o755)


def run(argv, cwd: Path, bindir: Path = None, **env) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("PYTHON", "MAKE", "VENV", "PY"))}
    if bindir is not None:
        base["PATH"] = f"{bindir}:{base['PATH']}"
    base["VENV"] = str(cwd / ".venv")  # absent: a fresh clone
    base.update(env)
    return subprocess.run(argv, cwd=cwd, env=base, capture_output=True, text=True, timeout=120,
                          check=False)


def our_lines(stderr: str):
    """stderr without make's own "make: *** [...] Error 1" trailer."""
    return [ln for ln in stderr.splitlines() if not ln.startswith("make: ***")]


def test_test_fast_says_run_setup_first(clone):
    p = run(["make", "test-fast"], clone)
    assert p.returncode != 0
    assert our_lines(p.stderr) == [f"make test-fast: no venv at {clone}/.venv: run 'sudo make "
                                   "setup' first (or VENV=/path/to/venv with pytest and pyyaml)"]


def test_jobs_without_venv_uses_python3(clone, tmp_path):
    (clone / "jobs/ddp_container.job").unlink()
    stub(tmp_path / "bin", "python3", f'exec {sys.executable} "$@"')  # has PyYAML
    p = run(["make", "jobs"], clone, tmp_path / "bin")
    assert p.returncode == 0, p.stderr
    assert "rendered jobs/ddp_container.job" in p.stdout
    assert (clone / "jobs/ddp_container.job").read_text() == \
        (ROOT / "jobs/ddp_container.job").read_text()


def test_jobs_without_pyyaml_is_one_line(clone, tmp_path):
    stub(tmp_path / "bin", "python3", 'echo "No module named yaml" >&2; exit 1')
    p = run(["make", "jobs"], clone, tmp_path / "bin")
    assert p.returncode != 0
    lines = our_lines(p.stderr)
    assert len(lines) == 1 and lines[0].startswith("make jobs: needs Python 3 with PyYAML")


def test_image_plan_does_not_need_the_wheel_or_the_venv(clone):
    p = run(["make", "-n", "image", "TORCH_WHEEL=/nonexistent/torch.whl"], clone)
    assert p.returncode == 0, p.stderr
    assert "build-image.sh base local" in p.stdout and ".venv" not in p.stdout


@pytest.fixture
def image_env(clone, tmp_path):
    """What build-image.sh needs to reach the wheelhouse step: apptainer (stub), a wheel."""
    wheel = tmp_path / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
    wheel.write_bytes(b"")
    stub(tmp_path / "bin", "apptainer", "exit 0")
    return {"TORCH_WHEEL": str(wheel), "FAKEROOT": "1"}


def test_image_without_any_pip_names_the_cause(clone, tmp_path, image_env):
    stub(tmp_path / "bin", "python3", "exit 1")  # no pip, no venv module
    p = run(["bash", "scripts/build-image.sh", "base", "local"], clone, tmp_path / "bin",
            **image_env)
    assert p.returncode == 1
    assert p.stderr.splitlines() == [
        "build-image: python3 has no pip and cannot make a venv (python3 -m venv failed): "
        "install python3-venv or python3-pip (Debian), or set PY=/path/to/python-with-pip"]
    assert "making one in build/tools-venv" in p.stdout


def test_image_pip_failure_shows_pips_error_not_a_guess(clone, tmp_path, image_env):
    stub(tmp_path / "bin", "python3", '[ "$3" = --version ] && exit 0\n'
         'echo "ERROR: No matching distribution found for numpy" >&2; exit 1')
    p = run(["bash", "scripts/build-image.sh", "base", "local"], clone, tmp_path / "bin",
            **image_env)
    assert p.returncode == 1
    assert p.stderr.splitlines() == [
        "ERROR: No matching distribution found for numpy",
        "build-image: pip download of torch's dependencies into build/wheelhouse/torch failed, "
        "see above (full log: build/logs/wheelhouse-torch.log; pip: python3)"]
    assert "PyPI" not in p.stderr


def test_image_uses_the_venv_when_there_is_one(clone, tmp_path, image_env):
    venv_bin = clone / ".venv/bin"
    stub(venv_bin, "python", '[ "$3" = --version ] && exit 0\necho "venv pip: $*" >&2; exit 1')
    p = run(["bash", "scripts/build-image.sh", "base", "local"], clone, tmp_path / "bin",
            **image_env)
    assert p.returncode == 1
    assert f"pip: {venv_bin}/python)" in p.stderr
