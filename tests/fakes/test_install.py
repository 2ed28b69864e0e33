"""Ring 2: `pip install .` into a fresh venv without torch gives both console scripts.

What a user does on a login node. PyYAML and `wheel` come from pip's configured indexes
(PyPI or a local mirror); the project is installed with --no-deps --no-build-isolation so
that the venv's own setuptools builds it and nothing else is fetched. Slow (a venv with
pip, two pip runs): about 6-15 s.
"""

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.srccopy import copy_sources

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def sh(*argv, cwd: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    # No PYTHONPATH: the installed copy, not this checkout, must answer.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    return subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout, check=False)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """bin/ of a venv with the project installed as a user would, and no torch."""
    tmp = tmp_path_factory.mktemp("install")
    src = tmp / "src"
    copy_sources(src)
    venv = tmp / "venv"
    steps = [
        [sys.executable, "-m", "venv", venv],
        # setuptools < 70.1 (Python 3.11's ensurepip: 65.5) builds wheels only with `wheel`.
        [venv / "bin/python", "-m", "pip", "install", "-q", "pyyaml", "wheel"],
        [venv / "bin/python", "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
         src],
    ]
    for argv in steps:
        p = sh(*argv, cwd=tmp)
        assert p.returncode == 0, f"{argv}: {p.stdout[-2000:]}{p.stderr[-2000:]}"
    shutil.rmtree(src)  # the installed copy must not need the source tree
    return venv / "bin"


def test_installed_copy_and_no_torch(installed, tmp_path):
    code = ("import importlib.util as u, launcher; "
            "print(u.find_spec('torch'), launcher.__file__.startswith(sys.prefix))")
    p = sh(installed / "python", "-c", f"import sys; {code}", cwd=tmp_path)
    assert p.stdout.split() == ["None", "True"], p.stderr


def test_composer_console_script(installed, tmp_path):
    shutil.copytree(ROOT / "jobs", tmp_path / "jobs")
    spec = "jobs/ddp_container.yaml"
    p = sh(installed / "jsc-compose", "check", spec, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith(f"{spec}: ok (torchrun, apptainer, 2 nodes")
    p = sh(installed / "jsc-compose", "--help", cwd=tmp_path)
    assert p.returncode == 0 and p.stdout.startswith("usage: jsc-compose ")
    assert "examples:" in p.stdout
    p = sh(installed / "python", "-m", "launcher", "render", spec, cwd=tmp_path)
    # The golden, but naming the installed kit (absolute: not inside the submit directory),
    # which lies under /tmp here: one line says the compute nodes cannot see it.
    where = sh(installed / "python", "-c", "import launcher, os; "
               "print(os.path.dirname(os.path.abspath(launcher.__file__)))", cwd=tmp_path)
    package = where.stdout.strip()
    assert package.startswith(str(installed.parent)) and package.endswith("/launcher")
    golden = (ROOT / "jobs/ddp_container.job").read_text()
    assert golden.count('\nkit="${PWD}/launcher"\n') == 1
    # ...and, not the clone's own jobs/ (another kit renders them), a header that names the
    # command, not `make jobs` (issue 43).
    job = "jobs/ddp_container.job"
    golden = golden.replace(f"make jobs, or python -m launcher render {spec}",
                            f"jsc-compose render {spec}").replace(
        f"the repo root (jobs/' relative paths are its): sbatch {job}",
        f"the directory its relative paths refer to: sbatch {job}")
    assert p.returncode == 0 and p.stdout == golden.replace(
        '\nkit="${PWD}/launcher"\n', f"\nkit={shlex.quote(package)}\n")
    assert len(p.stderr.splitlines()) == 1 and "is on this node only" in p.stderr, p.stderr


def test_torchrun_jsc_console_script_without_torch(installed, tmp_path):
    p = sh(installed / "torchrun_jsc", "--help", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("usage: torchrun_jsc ")
    assert "TORCHRUN_JSC_NODE_RANK" in p.stdout and "launching needs torch" in p.stdout
    p = sh(installed / "torchrun_jsc", "--nnodes=2", "train.py", cwd=tmp_path)
    assert p.returncode == 2 and len(p.stderr.splitlines()) == 1, p.stderr
