"""Ring 1: one recipe, two architectures (`make image ARCH=amd64|arm64`), checked without
building: the Makefile and scripts/build-image.sh agree on every output name, the amd64
defaults keep the names other work uses (image.sif, image.sqsh), every image labels its
architecture, and what cannot work is refused in one line before anything is built.
"""

from __future__ import annotations

import os
import re
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
    ("amd64", "ngc", ["build/base-ngc.sif", "image-ngc.sif", "horovod-ngc.sif",
                      "launchers-ngc.sif"]),
    ("arm64", "ngc", ["build/base-ngc-arm64.sif", "image-ngc-arm64.sif", "horovod-ngc-arm64.sif",
                      "launchers-ngc-arm64.sif"]),
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


def test_bad_compressor_is_one_line() -> None:
    r = script("paths", "local", COMPRESS="zip; rm -rf /")
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr == ("build-image: COMPRESS=zip; rm -rf /: expected a squashfs compressor: "
                        "zstd (the default), gzip, lz4, xz or lzo\n")
    assert script("paths", "local", COMPRESS="lz4").returncode == 0


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


@pytest.mark.parametrize("command,base,arch", [
    ("base", "cuda", "arm64"), ("prepare", "cuda", "arm64"), ("base", "cuda", HOST),
    ("base", "local", HOST)])
def test_debootstrap_bases_without_real_root_are_refused_before_any_work(
        command: str, base: str, arch: str, tmp_path: Path) -> None:
    """FAKEROOT=1 make image ARCH=arm64 as a JUPITER user: debootstrap (BASE=local, BASE=cuda)
    needs real root, which --fakeroot does not give; it used to fail after the 2.7 GB of wheels
    with a hint about the mirror. Run as uid 65534 (a user namespace when the tests run as
    root); an unused mirror makes sure no cached root filesystem lets it through."""
    nobody = ["unshare", "--user"] if os.getuid() == 0 else []
    env = {k: v for k, v in os.environ.items() if k != "ARCH"} | {
        "ARCH": arch, "FAKEROOT": "1", "MIRROR": "http://mirror.invalid/debian",
        "PY": str(tmp_path / "no-python")}  # pip would fail loudly, not silently download
    r = subprocess.run([*nobody, "bash", str(SCRIPT), command, base], capture_output=True,
                       text=True, timeout=60, env=env, cwd=REPO)
    assert r.returncode == 1 and r.stdout == "", r
    assert r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith(f"build-image: BASE={base} needs real root (uid "), r.stderr
    assert "debootstrap, which FAKEROOT=1 cannot run" in r.stderr
    assert f"FAKEROOT=1 make image ARCH={arch} BASE=ngc" in r.stderr


# --- BASE=ngc: the unprivileged path (JUPITER login nodes, no root) --------------------------
NGC_DEF = REPO / "containers" / "base-ngc.def"


def test_ngc_base_is_one_pinned_multi_arch_tag_everywhere() -> None:
    """The Makefile, the script and the definition default to the same NGC tag, a pinned
    YY.MM release (NGC's pytorch tags are multi-arch), never a moving one."""
    make = re.search(r"^NGC_FROM \?= (\S+)$", (REPO / "Makefile").read_text(), re.M).group(1)
    script_default = re.search(r"NGC_FROM=\$\{NGC_FROM:-([^}]+)\}", SCRIPT.read_text()).group(1)
    args = sections(NGC_DEF.read_text())["arguments"]
    def_default = re.search(r"^\s*FROM=(\S+)$", args, re.M).group(1)
    assert make == script_default == def_default
    assert re.fullmatch(r"nvcr\.io/nvidia/pytorch:\d\d\.\d\d-py3", make), make


def test_ngc_base_passes_exactly_its_arguments() -> None:
    """cmd_base's ngc branch passes every argument base-ngc.def declares and no other
    (Apptainer rejects an unused --build-arg only after the pull)."""
    text = SCRIPT.read_text()
    body = text.split("\ncmd_base() {\n", 1)[1].split("\n}\n", 1)[0]
    branch = body.split("\n        ngc)\n", 1)[1].split(";;", 1)[0]
    passed = set(re.findall(r'--build-arg "(\w+)=', branch))
    declared = {ln.split("=", 1)[0].strip()
                for ln in sections(NGC_DEF.read_text())["arguments"].splitlines() if "=" in ln}
    assert passed == declared == {"BOOTSTRAP", "FROM", "FILES"}
    assert "arch_opt=(--arch \"$ARCH\")" in branch  # the index's entry for a foreign ARCH


def test_ngc_recipe_adds_what_the_kit_needs_without_apt_where_ngc_has_it() -> None:
    text = NGC_DEF.read_text()
    assert "Bootstrap: {{ BOOTSTRAP }}" in text and "From: {{ FROM }}" in text
    found = sections(text)
    post = found["post"]
    for pkg in ("libibverbs1", "ibverbs-providers", "librdmacm1", "numactl"):
        assert pkg in post
    # apt runs only for what is missing, and then as a one-uid fakeroot namespace allows.
    guard = post.index('if [ -n "$missing" ]; then')
    assert all(post.index(cmd) > guard for cmd in ("apt-get -o APT::Sandbox::User=root update",
                                                    "apt-get -o APT::Sandbox::User=root install"))
    assert ": >/etc/environment" in post and "10-docker2singularity.sh" in post
    assert "verbs_check.py" in post and "import torch" in post
    assert "import torch" in found["test"] and "verbs_check.py" in found["test"]
    assert "/etc/environment" in found["environment"]


def test_ngc_copied_as_archive_or_bad_source_is_one_line(tmp_path: Path) -> None:
    """NGC_FROM=docker-archive:PATH / oci-archive:PATH take a copy made where nvcr.io is
    reachable; a missing file or a scheme is refused in one line, before anything is built."""
    for value, expect in [
            (f"docker-archive:{tmp_path}/none.tar", f"NGC_FROM=docker-archive:{tmp_path}/none.tar: no such file"),
            (f"oci-archive:{tmp_path}/none.tar", f"NGC_FROM=oci-archive:{tmp_path}/none.tar: no such file"),
            ("docker://nvcr.io/nvidia/pytorch:25.12-py3", "give the registry image without a scheme")]:
        r = script("base", "ngc", NGC_FROM=value, ARCH=HOST)
        assert r.returncode == 1 and r.stdout == "" and r.stderr.count("\n") == 1, r
        assert r.stderr.startswith("build-image: ") and expect in r.stderr, r.stderr


@pytest.mark.parametrize("target", ["horovod-image", "launchers-image"])
def test_ngc_layers_the_kit_does_not_build_are_refused_in_one_line(target: str) -> None:
    command = {"horovod-image": ["horovod", "ngc"],
               "launchers-image": ["launchers", "image-ngc.sif", "launchers-ngc.sif"]}[target]
    r = script(*command, ARCH=HOST)
    assert r.returncode == 1 and r.stdout == "" and r.stderr.count("\n") == 1, r
    assert "on BASE=ngc is not built by the kit" in r.stderr
