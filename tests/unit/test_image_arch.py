"""Ring 1: one recipe, two architectures (`make image ARCH=amd64|arm64`), checked without
building: the Makefile and scripts/build-image.sh agree on every output name, the amd64
defaults keep the names other work uses (image.sif, image.sqsh), every image labels its
architecture, and what cannot work is refused in one line before anything is built.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.unit.test_image_defs import sections

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "build-image.sh"
QEMU = REPO / "scripts" / "qemu-setup.sh"
HOST = {"x86_64": "amd64", "aarch64": "arm64"}.get(os.uname().machine, os.uname().machine)
OTHER = "arm64" if HOST == "amd64" else "amd64"


def make_n(*args: str) -> list[str]:
    out = subprocess.run(["make", "-n", "-B", "-C", str(REPO), *args], capture_output=True,
                         text=True, timeout=60, check=True).stdout
    return [ln for ln in out.splitlines() if ln.startswith("bash scripts/build-image.sh")]


def script(*args: str, **env: str) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k != "ARCH"} | env
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=60, env=full, cwd=REPO)


def test_default_image_builds_exactly_what_it_always_built() -> None:
    assert make_n("enroot-image", "ARCH=amd64") == [
        "bash scripts/build-image.sh base local", "bash scripts/build-image.sh image local",
        "bash scripts/build-image.sh enroot image.sif image.sqsh"]


@pytest.mark.parametrize("arch,base,names", [
    ("amd64", "local", ["build/base-local.sif", "image.sif", "horovod.sif", "launchers.sif"]),
    ("amd64", "cuda", ["build/base-cuda.sif", "image-cuda.sif", "horovod-cuda.sif",
                       "launchers-cuda.sif"]),
    ("arm64", "cuda", ["build/base-cuda-arm64.sif", "image-cuda-arm64.sif",
                       "horovod-cuda-arm64.sif", "launchers-cuda-arm64.sif"]),
    ("aarch64", "docker", ["build/base-docker-arm64.sif", "image-arm64.sif", "horovod-arm64.sif",
                           "launchers-arm64.sif"]),
])
def test_makefile_and_script_agree_on_names(arch: str, base: str, names: list[str]) -> None:
    r = script("paths", base, ARCH=arch)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == names
    lines = make_n("enroot-image", "launchers-image", f"ARCH={arch}", f"BASE={base}")
    image, sqsh = names[1], names[1].replace(".sif", ".sqsh")
    assert lines[0] == f"bash scripts/build-image.sh base {base}"
    assert f"bash scripts/build-image.sh enroot {image} {sqsh}" in lines
    launchers = [ln for ln in lines if " launchers" in ln][0]
    assert launchers == ("bash scripts/build-image.sh launchers" if image == "image.sif" else
                         f"bash scripts/build-image.sh launchers {image} {names[3]}")


def test_arm64_defaults_to_the_cuda_base() -> None:
    """PyPI's aarch64 torch 2.13 is the CUDA build: there is no CPU wheel to put in BASE=local."""
    assert make_n("image", "ARCH=arm64")[:2] == ["bash scripts/build-image.sh base cuda",
                                                 "bash scripts/build-image.sh image cuda"]


def test_bad_arch_is_one_line() -> None:
    r = script("paths", "local", ARCH="ppc64le")
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr == "build-image: ARCH=ppc64le: expected amd64 or arm64 (x86_64 and aarch64 are accepted too)\n"


def test_local_base_for_another_architecture_is_refused_first() -> None:
    r = script("base", "local", ARCH=OTHER)
    assert r.returncode == 1 and r.stderr.count("\n") == 1
    assert f"BASE=local builds only for this host's architecture ({HOST}), not ARCH={OTHER}" in r.stderr
    assert f"make image ARCH={OTHER} BASE=cuda" in r.stderr


def test_horovod_on_the_cuda_base_of_another_architecture_is_refused_in_one_line() -> None:
    """Horovod compiles in %post: not under emulation (tests/unit/test_horovod_cuda.py)."""
    r = script("horovod", "cuda", ARCH=OTHER)
    assert r.returncode == 1 and r.stderr.count("\n") == 1
    assert f"builds only for this host's architecture ({HOST}), not ARCH={OTHER}" in r.stderr


@pytest.mark.parametrize("definition", ["pytorch.def", "horovod.def", "launchers.def", "base-cuda.def"])
def test_every_image_labels_its_architecture(definition: str) -> None:
    post = sections((REPO / "containers" / definition).read_text())["post"]
    assert "org.torchrun-jsc.arch $" in post and "dpkg --print-architecture" in post


def test_qemu_setup_usage_is_one_line_and_shellcheck_clean() -> None:
    r = subprocess.run(["bash", str(QEMU), "riscv"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 1
    assert r.stderr == "qemu-setup: usage: qemu-setup.sh arm64|amd64 (got 'riscv')\n"
    assert shutil.which("shellcheck"), "shellcheck missing: run `make setup`"
    sc = subprocess.run(["shellcheck", str(QEMU)], capture_output=True, text=True, timeout=60)
    assert sc.returncode == 0, sc.stdout


def test_foreign_builds_register_qemu_before_building() -> None:
    text = SCRIPT.read_text()
    for command in ("base", "image", "horovod", "launchers"):
        body = text.split(f"\ncmd_{command}() {{\n", 1)[1].split("\n}\n", 1)[0]
        assert body.index("need_emulation") < body.index("lock_or_skip"), command


@pytest.mark.parametrize("version,ok", [("7.2", False), ("8.0", False), ("8.1", True),
                                        ("10.0", True), ("", False)])
def test_qemu_older_than_8_1_is_not_enough(version: str, ok: bool) -> None:
    """QEMU 7.2 (bookworm's) passes the host's /proc/cpuinfo to aarch64 programs and importing
    torch segfaults (measured here); 8.1+ emulates it."""
    text = QEMU.read_text()
    fn = text.split("\nnew_enough() {", 1)[1].split("\n}\n", 1)[0]
    r = subprocess.run(["bash", "-c", f'MIN_QEMU=8.1\nnew_enough() {{{fn}\n}}\nnew_enough "$1"',
                        "bash", version], timeout=30)
    assert (r.returncode == 0) == ok
