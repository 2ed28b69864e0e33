"""Ring 2: scripts/setup.sh against fakes: it says what it will change and why before acting,
asks only a terminal outside CI, logs apt output, and says "nothing to install" in one line.

PATH holds only stubs (apt-get, dpkg-query, id, python3, ...) and a few coreutils, so the
host's apt and apptainer are never reached; SETUP_ROOT keeps /etc/apt writes in a temp dir.
"""

import os
import pty
import shutil
import subprocess
from pathlib import Path
from typing import Optional

import pytest

ROOT = Path(__file__).resolve().parents[2]
COREUTILS = ["bash", "dirname", "grep", "cat", "rm", "touch", "date", "tail", "mkdir", "cp", "stat",
             "mktemp"]
APT = ["slurm-wlm", "slurm-client", "munge", "shellcheck"]  # a few of setup.sh's list, enough to tell


def stub(path: Path, body: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/bash\n{body}\n")
    path.chmod(0o755)


# `python -c 'import torch, yaml, pytest'` succeeds; scripts/check-pins.py finds the launchers'
# pins unless FAKE_PINS_MISSING is set.
VENV_PYTHON = ('case "$1" in */check-pins.py) [ -z "${FAKE_PINS_MISSING:-}" ] ;; *) exit 0 ;; esac')
VENV_PIP = 'echo "${DS_BUILD_OPS+DS_BUILD_OPS=$DS_BUILD_OPS }pip $*" >>"$RECORD"'


class Host:
    """A fake Debian host: what is installed, and a record of every install command."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.repo = tmp / "repo"
        self.bin = tmp / "bin"
        self.root = tmp / "root"
        self.venv = tmp / "venv"
        self.record = tmp / "record"
        self.record.write_text("")
        (self.repo / "scripts").mkdir(parents=True)
        shutil.copy(ROOT / "scripts/setup.sh", self.repo / "scripts/setup.sh")
        shutil.copy(ROOT / "scripts/check-pins.py", self.repo / "scripts/check-pins.py")
        (self.repo / "requirements").mkdir()
        shutil.copy(ROOT / "requirements/launchers.txt", self.repo / "requirements/launchers.txt")
        stub(self.repo / "scripts/apptainer-config.sh", 'echo "apptainer-config" >>"$RECORD"')
        self.bin.mkdir()
        for tool in COREUTILS:
            (self.bin / tool).symlink_to(shutil.which(tool))
        stub(self.bin / "id", 'echo "${FAKE_UID:-0}"')
        # As on a fresh machine: no slurm.conf yet, so Slurm's clients cannot say their version
        # (setup must take it from dpkg, never from a service that set-up configures later).
        stub(self.bin / "sinfo", 'echo "sinfo: fatal: Could not establish a configuration source" >&2\n'
             'exit 1')
        stub(self.bin / "srun", 'echo "srun: fatal: Could not establish a configuration source" >&2\n'
             'exit 1')
        stub(self.bin / "dpkg-query",
             'for p in $FAKE_MISSING; do [ "$p" = "${!#}" ] && exit 1; done\n'
             '[ "$2" = "-f=\\${Version}" ] || [ "$3" = "\\${Version}" ] && { printf "${FAKE_SLURM:-24.11.5-4}"; exit 0; }\n'
             'printf "install ok installed"')
        stub(self.bin / "apt-get", 'echo "apt-get $*" >>"$RECORD"\n'
             'echo "Reading package lists... (apt noise)"\n'
             f'[ "${{!#}}" = apptainer/sid ] && cp "{self.tmp}/apptainer" "{self.bin}/apptainer"\n'
             'exit 0')
        stub(self.tmp / "apptainer", "echo apptainer version 1.4.5")
        stub(self.bin / "python3", f'[ "$1 $2" = "-m venv" ] || exit 1\n'
             f'echo "python3 $*" >>"$RECORD"\n'
             f'mkdir -p "$3/bin"; cp "{self.tmp}/venv-python" "$3/bin/python"; '
             f'cp "{self.tmp}/venv-pip" "$3/bin/pip"')
        stub(self.tmp / "venv-python", VENV_PYTHON)
        stub(self.tmp / "venv-pip", VENV_PIP)

    def everything_installed(self) -> None:
        shutil.copy(self.tmp / "apptainer", self.bin / "apptainer")
        conf = self.root / "etc/apptainer/apptainer.conf"
        conf.parent.mkdir(parents=True)
        conf.write_text("root default capabilities = file\n")
        (self.venv / "bin").mkdir(parents=True)
        shutil.copy(self.tmp / "venv-python", self.venv / "bin/python")
        shutil.copy(self.tmp / "venv-pip", self.venv / "bin/pip")

    def run(self, *args: str, tty_input: Optional[str] = None, missing=(),
            **env: str) -> subprocess.CompletedProcess:
        full = {"PATH": str(self.bin), "HOME": str(self.tmp), "RECORD": str(self.record),
                "VENV": str(self.venv), "SETUP_ROOT": str(self.root),
                "FAKE_MISSING": " ".join(missing), **env}
        argv = [str(self.bin / "bash"), str(self.repo / "scripts/setup.sh"), *args]
        if tty_input is None:
            return subprocess.run(argv, env=full, stdin=subprocess.DEVNULL, capture_output=True,
                                  text=True, timeout=60, check=False)
        master, slave = pty.openpty()
        try:
            os.write(master, tty_input.encode())
            return subprocess.run(argv, env=full, stdin=slave, capture_output=True, text=True,
                                  timeout=60, check=False)
        finally:
            os.close(master)
            os.close(slave)

    def installs(self) -> str:
        return self.record.read_text()


@pytest.fixture
def host(tmp_path) -> Host:
    return Host(tmp_path)


def test_plan_on_a_bare_host_names_every_change_and_changes_nothing(host):
    p = host.run("--plan", missing=APT, FAKE_UID="1000")  # no root needed for --plan
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert out.startswith("setup: this will change the host:\n")
    assert "apt (bookworm): munge shellcheck" in out
    assert "apt (trixie): Slurm 24.11: slurm-wlm slurmctld slurmd slurm-client slurmdbd" in out
    assert "systemd from trixie" in out
    assert "/etc/slurm" in out
    assert "glibc from Debian trixie: libc6" in out and "Apptainer only from sid" in out
    assert "/etc/apt/sources.list.d/torchrun-jsc-trixie-sid.sources" in out
    assert "/etc/apptainer/apptainer.conf" in out
    assert f"{host.venv}: a venv with torch==2.13.0" in out
    assert f"apt and pip output: {host.repo}/build/logs/setup.log" in out
    assert host.installs() == "" and not host.root.exists()


def test_nothing_to_install_is_one_line_and_asks_nothing(host):
    host.everything_installed()
    p = host.run(tty_input="")  # a terminal, but nothing to confirm
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == [
        f"setup: nothing to install (venv {host.venv}, apptainer version 1.4.5, slurm 24.11.5)"]
    assert p.stderr == ""
    assert "apt-get" not in host.installs()  # only the idempotent refresh ran
    assert host.installs().splitlines() == [
        "apptainer-config", f"pip install -q --no-deps -e {host.repo}"]


def test_plan_when_nothing_is_missing(host):
    host.everything_installed()
    p = host.run("--plan")
    assert p.stdout == "setup: nothing to install\n"


def test_terminal_is_asked_and_no_means_nothing_changes(host):
    p = host.run(tty_input="n\n", missing=APT)
    assert p.returncode == 1
    assert "setup: go ahead? [y/N]" in p.stderr
    # The answer's echo goes to the terminal, so here the line follows the prompt directly.
    assert p.stderr == ("setup: go ahead? [y/N] setup: nothing changed (answer was not "
                        "yes); --yes or SETUP_YES=1 skips this question\n")
    assert host.installs() == "" and not (host.root / "etc/apt").exists()


def test_terminal_yes_installs_with_progress_lines_and_apt_output_in_the_log(host):
    p = host.run(tty_input="y\n", missing=["slurm-wlm", "munge", "shellcheck"])
    assert p.returncode == 0, p.stderr
    steps = [ln for ln in p.stdout.splitlines() if ln.startswith("setup: ") and
             not ln.startswith("setup: this will")]
    assert steps == [
        "setup: apt sources for trixie and sid (pinned low)",
        "setup: apt-get update",
        "setup: systemd from trixie (for Slurm 24.11's package scripts)",
        "setup: Slurm 24.11 from trixie",
        "setup: apt-get install (2 packages)",
        "setup: glibc from trixie (for sid's apptainer)",
        "setup: apptainer from sid",
        f"setup: venv {host.venv} with torch 2.13 (several minutes)",
        f"setup: launchers into {host.venv} (requirements/launchers.txt)",
        f"setup: ok (venv {host.venv}, apptainer version 1.4.5, slurm 24.11.5)",
    ]
    assert "apt noise" not in p.stdout + p.stderr
    assert "apt noise" in (host.repo / "build/logs/setup.log").read_text()
    calls = host.installs()
    assert "apt-get install -y -qq -o DPkg::Lock::Timeout=600 --no-install-recommends " \
           "munge shellcheck" in calls
    assert "-t trixie slurm-wlm slurmctld slurmd slurm-client slurmdbd openmpi-bin" in calls
    assert "-t trixie libc6 libc-bin" in calls and "apptainer/sid" in calls
    assert "pip install -q torch==2.13.0" in calls
    assert "pip install -q --no-build-isolation -c " in calls
    assert f"-r {host.repo}/requirements/launchers.txt" in calls
    assert (host.root / "etc/apt/preferences.d/torchrun-jsc-trixie-sid").exists()


@pytest.mark.parametrize("how", [{"CI": "true"}, {"SETUP_YES": "1"}, {"args": "--yes"}])
def test_ci_and_opt_in_never_ask(host, how):
    how = dict(how)
    args = [how.pop("args")] if "args" in how else []
    tty = None if "CI" in how else ""  # CI: no stdin at all; opt-in: a terminal that says nothing
    p = host.run(*args, tty_input=tty, missing=APT, **how)
    assert p.returncode == 0, p.stderr
    assert "go ahead?" not in p.stderr
    assert "apt-get install" in host.installs()


def test_second_run_is_idempotent(host):
    assert host.run("--yes", missing=["munge"]).returncode == 0
    host.record.write_text("")
    p = host.run(missing=["munge"])  # the fake dpkg still says munge is missing
    assert "apt-get update" not in host.installs()  # stamp: updated once
    assert "python3 -m venv" not in host.installs()  # the venv is there now
    assert p.returncode == 0


def test_not_root_is_one_line(host):
    p = host.run(missing=APT, FAKE_UID="1000")
    assert p.returncode == 1 and host.installs() == ""
    assert p.stderr.splitlines() == [
        "setup: must run as root (apt-get, /etc/apptainer); rerun with sudo (bash "
        "scripts/setup.sh --plan shows what it would change)"]


def test_setup_passes_shellcheck():
    assert shutil.which("shellcheck"), "shellcheck missing: run `make setup`"
    p = subprocess.run(["shellcheck", str(ROOT / "scripts/setup.sh")], capture_output=True,
                       text=True, timeout=60, check=False)
    assert p.returncode == 0, p.stdout


def test_unknown_option_is_one_line(host):
    p = host.run("--yse")
    assert p.returncode == 1
    assert p.stderr == "setup: unknown option '--yse': usage: setup.sh [--plan] [--yes]\n"


def test_launchers_alone_are_installed_when_their_pins_are_not_met(host):
    host.everything_installed()
    p = host.run("--plan", FAKE_PINS_MISSING="1")
    assert "accelerate, deepspeed, ray, submitit as pinned in requirements/launchers.txt" in p.stdout
    p = host.run(FAKE_PINS_MISSING="1")
    assert p.returncode == 0, p.stderr
    assert [ln for ln in p.stdout.splitlines() if ln.startswith("setup: l")] == [
        f"setup: launchers into {host.venv} (requirements/launchers.txt)"]
    calls = host.installs()
    assert "python3 -m venv" not in calls and "apt-get" not in calls
    # DeepSpeed's sdist as pure Python, with torch held by the constraints file.
    assert "DS_BUILD_OPS=0 pip install -q --no-build-isolation -c " in calls
    assert f"-r {host.repo}/requirements/launchers.txt" in calls


def test_older_slurm_is_replaced_by_the_current_series(host):
    host.everything_installed()
    p = host.run("--plan", FAKE_SLURM="22.05.8-4")
    assert "apt (trixie): Slurm 24.11: slurm-wlm" in p.stdout
    assert "(replaces Slurm 22.05.8)" in p.stdout
    p = host.run(FAKE_SLURM="22.05.8-4")
    assert p.returncode == 0, p.stderr
    assert "-t trixie slurm-wlm" in host.installs()


def test_lab_slurm_2205_on_a_fresh_machine_comes_from_bookworm(host):
    host.everything_installed()  # apptainer there: no trixie sources needed for 22.05
    p = host.run("--yes", missing=["slurm-client", "slurm-wlm"], LAB_SLURM="22.05")
    assert p.returncode == 0, p.stderr
    assert "setup: Slurm 22.05 from bookworm" in p.stdout
    calls = host.installs()
    assert "--no-install-recommends slurm-wlm slurmctld slurmd slurm-client slurmdbd" in calls
    assert "-t trixie" not in calls
    assert not (host.root / "etc/apt/sources.list.d/torchrun-jsc-trixie-sid.sources").exists()


def test_lab_slurm_never_downgrades_and_refuses_unknown_series(host):
    host.everything_installed()
    p = host.run("--plan", LAB_SLURM="22.05")
    assert p.returncode == 1 and host.installs() == ""
    assert p.stderr == ("setup: LAB_SLURM=22.05, but Slurm 24.11.5 is installed: setup never "
                        "downgrades (use a fresh machine)\n")
    p = host.run("--plan", LAB_SLURM="23.02")
    assert p.returncode == 1
    assert p.stderr == ("setup: LAB_SLURM: expected 24.11 (Debian trixie, the default) or 22.05 "
                        "(bookworm), got '23.02'\n")
