"""Ring 2: `jsc-compose venv` (launcher.render.venvjob): the build script run by bash through the
CLI and a fake sbatch, with real python3 -m venv and pip (no network: an empty or
unsatisfiable requirements file and --no-index), a fake `module` command
(tests/helpers/modulecmd), and the run job's warning with the recording fakes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.helpers import fake
from tests.helpers.cluster import Cluster

ROOT = Path(__file__).resolve().parents[2]
MODULECMD = ROOT / "tests" / "helpers" / "modulecmd"
HOSTILE = "v e'n\"v $(touch pwned) `id` ;ü"
SECRET = "http://user:s3cr3t@proxy.example:3128"


def _cli(env: dict, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "launcher", "venv", *args], cwd=cwd,
                          env=dict(env, PYTHONPATH=str(ROOT)), capture_output=True, text=True,
                          timeout=180, check=False)


@pytest.fixture
def build_env(tmp_path: Path) -> dict:
    """Fake sbatch (runs the script at once) and fake module; the real python3 and pip."""
    fake.install(tmp_path / "fakes", tmp_path / "log")
    only = tmp_path / "bin"
    only.mkdir()
    (only / "sbatch").symlink_to(tmp_path / "fakes" / "sbatch")
    (tmp_path / "modules").mkdir()
    path = f"{MODULECMD}:{only}:{Path(sys.executable).resolve().parent}:/usr/bin:/bin"
    return {"PATH": path, "FAKE_LOG": str(tmp_path / "log"), "HOME": str(tmp_path),
            "FAKE_MODULES_DIR": str(tmp_path / "modules"), "https_proxy": SECRET,
            "PIP_NO_INDEX": "1", "LANG": "C.UTF-8"}


@pytest.mark.slow  # builds two venvs
def test_build_hostile_paths_then_a_failed_rebuild_keeps_the_venv(tmp_path, build_env):
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / f"req {HOSTILE}.txt").write_text("")
    (sub / "t.yaml").write_text(yaml.safe_dump({
        "job": {"nodes": 2}, "site": {"venv": HOSTILE, "modules": ["Stages/2025", "GCC 13"]},
        "program": ["python3", "t.py"]}, allow_unicode=True), encoding="utf-8")
    done = _cli(build_env, sub, "t.yaml", f"--requirements=req {HOSTILE}.txt",
                "--pip-option=--no-index")
    assert (done.returncode, done.stdout) == (0, "4242\n"), done.stderr
    log = (tmp_path / "log" / "job-4242.out").read_text()
    assert fake.records(tmp_path / "log", "sbatch-done")[0]["rc"] == 0, log
    assert "module: purge\nmodule: load Stages/2025\nmodule: load GCC 13\n" in log
    assert "proxy variables set (names only): https_proxy" in log and "s3cr3t" not in log
    assert "s3cr3t" not in (sub / "t.venv.job").read_text()
    venv = sub / HOSTILE
    first = os.readlink(venv)
    assert first.startswith(f"{HOSTILE}.builds/4242.")
    assert (venv / ".jsc-modules").read_text() == "Stages/2025\nGCC 13\n"
    prefix = subprocess.run([str(venv / "bin" / "python"), "-c", "import sys; print(sys.prefix)"],
                            capture_output=True, text=True, check=True).stdout.strip()
    assert prefix == str(venv)  # a working venv, found through the symlink
    # Its scripts name the build's own path, which never moves (why the swap is a symlink).
    assert f"{sub / first}/bin/python" in (venv / "bin" / "pip").read_text()
    assert not list(tmp_path.rglob("pwned"))

    # A rebuild whose pip fails: the venv still points at the first build, nothing half left.
    (sub / "bad.txt").write_text("no-such-package-jsc-test==1.0\n")
    done = _cli(build_env, sub, "t.yaml", "--requirements=bad.txt", "-o", "b.job")
    assert done.returncode == 0, done.stderr
    assert fake.records(tmp_path / "log", "sbatch-done")[1]["rc"] != 0
    assert os.readlink(venv) == first
    assert [p.name for p in (sub / f"{HOSTILE}.builds").iterdir()] == [first.split("/")[1]]


def test_build_refuses_a_venv_it_did_not_make(tmp_path, build_env):
    (tmp_path / ".venv").mkdir()
    (tmp_path / "requirements.txt").write_text("")
    (tmp_path / "t.yaml").write_text("job: {nodes: 1}\nsite: {venv: .venv}\nprogram: [x]\n")
    done = _cli(build_env, tmp_path, "t.yaml")
    assert done.returncode == 0, done.stderr
    log = (tmp_path / "log" / "job-4242.out").read_text()
    assert "venv build: .venv is a directory, not a build of jsc-compose venv" in log
    assert fake.records(tmp_path / "log", "sbatch-done")[0]["rc"] == 1
    assert not (tmp_path / ".venv.builds").exists()  # refused before anything was made


def test_cli_venv_errors_are_one_line(tmp_path, build_env):
    (tmp_path / "t.yaml").write_text("job: {nodes: 1}\nsite: {venv: .venv}\nprogram: [x]\n")
    done = _cli(build_env, tmp_path, "t.yaml")
    assert done.returncode == 2 and done.stderr == (
        "t.yaml: --requirements: file not found (relative to the submit directory, where the "
        "build job starts), got 'requirements.txt'\n")
    assert not fake.records(tmp_path / "log", "sbatch")
    done = _cli(build_env, tmp_path, "t.yaml", "--dry-run")
    assert done.returncode == 0 and done.stdout.startswith("#!/bin/bash\n")


@pytest.mark.parametrize("recorded, warned", [
    (None, False), ("Stages/2025\nGCC 13\n", False), ("Stages/2024\nGCC\n", True)])
def test_run_job_warns_when_the_venv_modules_differ(tmp_path, recorded, warned):
    fakes = Cluster(tmp_path)
    activate = fakes.dir / "my venv" / "bin" / "activate"
    activate.parent.mkdir(parents=True)
    activate.write_text("")
    if recorded is not None:
        (fakes.dir / "my venv" / ".jsc-modules").write_text(recorded)
    script = fakes.render("""\
        job: {nodes: 2}
        site: {profile: jsc, venv: my venv, modules: [Stages/2025, "GCC 13"],
               env: {NCCL_IB_GID_INDEX: "3"}}
        program: [python3, t.py]
        """)
    done = fakes.run(script)
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("warning:")]
    expected = ["warning: the venv was built with modules [Stages/2024 GCC] but this job loads "
                "[Stages/2025 GCC 13] (my venv/.jsc-modules): rebuild it with jsc-compose venv"]
    assert lines == (expected if warned else [])
    assert len(fakes.records("python3")) == 2  # warned, not failed


def make_wheel(where: Path, name: str, version: str) -> Path:
    """A minimal pure-Python wheel (a zip with the metadata pip reads), no build tools needed."""
    import zipfile
    dist = f"{name}-{version}.dist-info"
    files = {f"{name}.py": "VALUE = 42\n",
             f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                              "Tag: py3-none-any\n"}
    files[f"{dist}/RECORD"] = "".join(f"{f},,\n" for f in files) + f"{dist}/RECORD,,\n"
    path = where / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for f, text in files.items():
            z.writestr(f, text)
    return path


@pytest.mark.slow  # builds a venv
def test_wheelhouse_download_on_login_node_then_offline_build(tmp_path, build_env):
    """JSC's compute nodes have no internet: `venv --wheelhouse DIR` downloads on the login node
    (here: python3 sees the 'internet', a find-links directory, only when it runs pip download)
    and the build job installs with --no-index from DIR alone."""
    internet = tmp_path / "internet"
    internet.mkdir()
    make_wheel(internet, "jsctoy", "1.0")
    login = tmp_path / "login-bin"
    login.mkdir()
    real = Path(sys.executable).resolve()
    (login / "python3").write_text(
        "#!/bin/bash\n"
        f'if [ "$1 $2 $3" = "-m pip download" ]; then export PIP_FIND_LINKS={internet}; fi\n'
        f'exec {real} "$@"\n')
    (login / "python3").chmod(0o755)
    env = dict(build_env, PATH=f"{login}:{build_env['PATH']}")
    (tmp_path / "requirements.txt").write_text("jsctoy==1.0\n")
    (tmp_path / "t.yaml").write_text("job: {nodes: 1}\nsite: {venv: .venv}\nprogram: [x]\n")
    house = tmp_path / "wheels $(touch pwned)"
    done = _cli(env, tmp_path, "t.yaml", f"--wheelhouse={house}")
    assert (done.returncode, done.stdout) == (0, "4242\n"), done.stderr
    assert [p.name for p in house.iterdir()] == ["jsctoy-1.0-py3-none-any.whl"]
    script = (tmp_path / "t.venv.job").read_text()
    assert "--no-index" in script and "--find-links=" in script
    log = (tmp_path / "log" / "job-4242.out").read_text()
    assert fake.records(tmp_path / "log", "sbatch-done")[0]["rc"] == 0, log
    value = subprocess.run([str(tmp_path / ".venv" / "bin" / "python"), "-c",
                            "import jsctoy; print(jsctoy.VALUE)"], capture_output=True, text=True)
    assert value.stdout == "42\n", value.stderr
    assert not list(tmp_path.rglob("pwned"))


def test_wheelhouse_download_failure_is_one_line_and_submits_nothing(tmp_path, build_env):
    (tmp_path / "requirements.txt").write_text("no-such-package-jsc-test==1.0\n")
    (tmp_path / "t.yaml").write_text("job: {nodes: 1}\nsite: {venv: .venv}\nprogram: [x]\n")
    done = _cli(build_env, tmp_path, "t.yaml", "--wheelhouse=w")
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"venv --wheelhouse: pip download into {tmp_path / 'w'} failed (rc 1): "), last
    assert not fake.records(tmp_path / "log", "sbatch")
    assert not (tmp_path / "t.venv.job").exists()
