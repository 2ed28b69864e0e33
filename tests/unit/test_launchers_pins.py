"""Ring 1: the launchers' pins (requirements/launchers.txt) agree with pyproject's `launchers`
extra and with what scripts/setup.sh installs; scripts/check-pins.py tells exactly what is off.
"""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "requirements/launchers.txt"
CHECK = ROOT / "scripts/check-pins.py"
LAUNCHERS = {"accelerate", "deepspeed", "ray", "submitit"}


def pins(text: str) -> dict:
    out = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            out[re.sub(r"[-_.]+", "-", name).lower()] = version
    return out


def test_every_line_is_an_exact_pin_and_torch_stays_out():
    lines = [ln for ln in LOCK.read_text().splitlines() if ln and not ln.startswith("#")]
    assert all(re.fullmatch(r"[A-Za-z0-9_.-]+==[0-9][0-9A-Za-z.+]*", ln) for ln in lines), lines
    got = pins(LOCK.read_text())
    assert LAUNCHERS <= set(got)
    # torch and its dependencies stay as the venv or the base image has them.
    assert not {"torch", "numpy", "sympy", "setuptools", "filelock", "fsspec"} & set(got)


def test_pyproject_extra_names_the_same_versions():
    extra = re.search(r"^launchers = \[(.*)\]$", (ROOT / "pyproject.toml").read_text(), re.M)
    assert extra, "pyproject.toml has no launchers extra"
    named = pins("\n".join(x.strip().strip('"') for x in extra.group(1).split(",")))
    lock = pins(LOCK.read_text())
    assert named == {k: lock[k] for k in LAUNCHERS}


def run_check(tmp_path, body: str, *args: str):
    req = tmp_path / "req.txt"
    req.write_text(body)
    return subprocess.run([sys.executable, str(CHECK), *args, str(req)], capture_output=True,
                          text=True, timeout=60, check=False)


def test_check_pins_ok_and_quiet(tmp_path):
    import pytest as installed  # a package this Python surely has
    p = run_check(tmp_path, f"# comment\n\nPyTest=={installed.__version__}  # trailing\n")
    assert (p.returncode, p.stdout, p.stderr) == (0, f"pins ok: 1 from {tmp_path}/req.txt\n", "")
    p = run_check(tmp_path, f"pytest=={installed.__version__}\n", "--quiet")
    assert (p.returncode, p.stdout, p.stderr) == (0, "", "")


def test_check_pins_names_what_is_missing_or_differs_in_one_line(tmp_path):
    p = run_check(tmp_path, "pytest==0.0.1\nno-such-package-xyz==1.0\n")
    assert p.returncode == 1 and p.stdout == ""
    assert p.stderr.splitlines() == [
        f"check-pins: 2 of 2 pins from {tmp_path}/req.txt not installed: "
        "no-such-package-xyz missing, pytest " + __import__("pytest").__version__ + " (pinned 0.0.1)"]


def test_check_pins_rejects_a_line_that_is_not_a_pin(tmp_path):
    p = run_check(tmp_path, "torch>=2\n")
    assert p.returncode == 2
    assert p.stderr == f"check-pins: {tmp_path}/req.txt:1: 'torch>=2' is not name==version\n"
