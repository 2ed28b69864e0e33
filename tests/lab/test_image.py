"""Ring 3: real Apptainer builds of image.sif and image.sqsh (containers/, scripts/build-image.sh).

Images are built through make, as users build them: the local base (debootstrap bookworm
+ the on-disk torch wheel) is built once and cached in build/, the launcher layer only when
its inputs change. These tests fail, never skip, when apptainer or root is missing.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

import launcher
from tests.helpers.srccopy import copy_sources

REPO = Path(__file__).resolve().parents[2]
IMAGE = REPO / "image.sif"
SQSH = REPO / "image.sqsh"
BASE = REPO / "build" / "base-local.sif"
BUILD_TIMEOUT = 1800  # a cold base build (debootstrap + torch) takes ~2-3 min on 2 cores


def run(cmd: list[str], timeout: float = 300, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout, **kw)


def make(*targets: str, timeout: float = BUILD_TIMEOUT) -> subprocess.CompletedProcess:
    r = run(["make", *targets], timeout=timeout)
    assert r.returncode == 0, f"make {' '.join(targets)} failed:\n{r.stdout}\n{r.stderr}"
    return r


def in_image(*cmd: str, image: Path = IMAGE) -> str:
    r = run(["apptainer", "exec", str(image), *cmd], timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


@pytest.fixture(scope="module")
def image() -> Path:
    assert shutil.which("apptainer"), "apptainer not on PATH: run `bash scripts/setup.sh` as root"
    assert os.geteuid() == 0, "image builds need root here (see docs/development/containers.md for --fakeroot)"
    make("image", "enroot-image")
    return IMAGE


def test_apptainer_test_passes(image: Path) -> None:
    r = run(["apptainer", "test", str(image)], timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ALLREDUCE_OK world_size=2 sum=3" in r.stdout.splitlines()


def test_run_passes_arguments_to_torchrun_jsc(image: Path) -> None:
    r = run(["apptainer", "run", str(image), "torchrun_jsc", "--help"], timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("usage: torchrun_jsc")
    assert "--rdzv-endpoint" in r.stdout


def test_run_without_arguments_prints_usage(image: Path) -> None:
    r = run(["apptainer", "run", str(image)], timeout=120)
    assert r.returncode == 0, r.stderr
    assert "apptainer run image.sif torchrun_jsc" in r.stdout


def head() -> str:
    return run(["git", "rev-parse", "HEAD"], timeout=30).stdout.strip()


def test_labels_are_present_and_true(image: Path) -> None:
    make("image")  # relabels if HEAD moved since the fixture built it (shared working trees)
    r = run(["apptainer", "inspect", "--labels", "--json", str(image)], timeout=60)
    assert r.returncode == 0, r.stderr
    labels = json.loads(r.stdout)["data"]["attributes"]["labels"]
    get = lambda key: labels[f"org.torchrun-jsc.{key}"]  # noqa: E731
    assert get("torch-version") == in_image("python3", "-c", "import torch; print(torch.__version__)")
    assert get("python-version") == in_image("python3", "-c", "import platform; print(platform.python_version())")
    assert get("launcher-version") == launcher.__version__
    assert get("launcher-version") == in_image("python3", "-c", "import launcher; print(launcher.__version__)")
    assert get("git-commit").removesuffix("-dirty") == head()
    wheel = os.environ.get("TORCH_WHEEL", "/opt/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl")
    assert get("base") == f"debootstrap:bookworm+{Path(wheel).name}"
    assert "VERSION_CODENAME=bookworm" in in_image("cat", "/etc/os-release").splitlines()
    # the architecture, as check --image reads it without running the image (issue 29)
    assert get("arch") == in_image("dpkg", "--print-architecture")
    from launcher.node.image_arch import image_arch, normalize_arch
    assert image_arch(str(image)).arch == normalize_arch(get("arch")) == normalize_arch(os.uname().machine)


def test_environment_is_in_etc_environment(image: Path) -> None:
    lines = in_image("cat", "/etc/environment").splitlines()
    assert lines and all("=" in line and " " not in line and '"' not in line for line in lines)
    env = dict(line.split("=", 1) for line in lines)
    # Apptainer applies the same file through %environment.
    assert in_image("sh", "-c", 'echo "$PYTHONNOUSERSITE:$PATH"') == f"{env['PYTHONNOUSERSITE']}:{env['PATH']}"


def test_launcher_only_change_rebuilds_layer_not_base(image: Path) -> None:
    base_mtime, image_mtime, commit = BASE.stat().st_mtime_ns, image.stat().st_mtime_ns, head()
    start = time.monotonic()
    # -W: make pretends the launcher changed, without touching the shared working tree.
    r = make("-W", "launcher/__init__.py", "image", timeout=600)
    layer_s = time.monotonic() - start
    assert "build-image.sh image local" in r.stdout
    assert "build-image.sh base" not in r.stdout
    assert BASE.stat().st_mtime_ns == base_mtime
    assert image.stat().st_mtime_ns != image_mtime
    times = json.loads((REPO / "build" / "image-times.json").read_text())
    assert times["image_build_s"] > 0
    if "base-local_build_s" in times:  # measured when this checkout built its base
        assert layer_s < times["base-local_build_s"] + times["image_build_s"]
    # Nothing changed since: a second make is a no-op (unless someone committed meanwhile).
    second = make("image").stdout
    if head() == commit:
        assert "build-image.sh" not in second


def test_enroot_squashfs_lists_launcher_and_environment(image: Path) -> None:
    make("enroot-image")
    r = run(["unsquashfs", "-l", str(SQSH)], timeout=120)
    assert r.returncode == 0, r.stderr
    listing = set(r.stdout.split())
    assert "squashfs-root/usr/local/bin/torchrun_jsc" in listing
    assert "squashfs-root/etc/environment" in listing
    r = run(["unsquashfs", "-cat", str(SQSH), "etc/environment"], timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout == in_image("cat", "/etc/environment") + "\n"


def test_enroot_like_start_runs_torchrun_jsc(image: Path) -> None:
    """What `enroot create` + `enroot start` do, without Slurm or Enroot (quick; the real
    Enroot runs in test_e2e_enroot.py): unpack the squashfs, bind the host's /dev as Enroot
    does (the image carries no device nodes), start with an empty environment plus the
    image's /etc/environment."""
    make("enroot-image")
    top = Path(tempfile.mkdtemp(prefix="enroot-like-", dir="/dev/shm" if Path("/dev/shm").is_dir() else None))
    try:
        r = run(["unsquashfs", "-q", "-d", str(top / "rootfs"), str(SQSH)], timeout=300)
        assert r.returncode == 0, r.stderr
        env_lines = (top / "rootfs" / "etc" / "environment").read_text().split()
        (top / "rootfs" / "dev").mkdir(exist_ok=True)
        start = 'mount --rbind /dev "$1/dev" && shift && exec "$@"'
        r = run(["unshare", "--mount", "--propagation", "private", "sh", "-c", start, "sh",
                 str(top / "rootfs"), "env", "-i", *env_lines, "chroot", str(top / "rootfs"),
                 "torchrun_jsc", "--help"], timeout=120)
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith("usage: torchrun_jsc")
    finally:
        shutil.rmtree(top, ignore_errors=True)


# ---- errors: one line that says what to do, exit non-zero, nothing half-written ----------

def last_line(text: str) -> str:
    return text.strip().splitlines()[-1]


def no_temp_files(directory: Path) -> list[str]:
    return [p.name for p in directory.iterdir() if ".tmp." in p.name]


def test_missing_apptainer_says_install(tmp_path: Path) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in ("bash", "dirname", "basename", "id", "awk", "mkdir", "git", "date", "rm"):
        (bindir / tool).symlink_to(shutil.which(tool))
    out = tmp_path / "x.sif"
    r = run([str(bindir / "bash"), "scripts/build-image.sh", "image", "local", str(out)],
            timeout=60, env={"PATH": str(bindir)})
    assert r.returncode != 0
    assert r.stderr.count("\n") == 1, r.stderr
    assert "apptainer not found" in r.stderr and "install" in r.stderr
    assert list(tmp_path.iterdir()) == [bindir]


def test_not_root_suggests_fakeroot() -> None:
    # A world-readable copy: the checkout may sit in a directory `nobody` cannot enter.
    top = Path(tempfile.mkdtemp(prefix="build-image-nobody-", dir="/tmp"))
    try:
        os.chmod(top, 0o755)
        (top / "scripts").mkdir(mode=0o755)
        shutil.copy(REPO / "scripts" / "build-image.sh", top / "scripts")
        out = top / "x.sif"
        r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                            "bash", "scripts/build-image.sh", "image", "local", str(out)],
                           cwd=top, capture_output=True, text=True, timeout=60)
        assert r.returncode != 0
        assert r.stderr.count("\n") == 1, r.stderr
        assert "needs root" in r.stderr and "--fakeroot" in r.stderr
        assert sorted(p.name for p in top.iterdir()) == ["scripts"]
    finally:
        shutil.rmtree(top)


def test_unfetchable_base_says_use_local_base() -> None:
    build = REPO / "build"
    existed = (build / "base-docker.sif").exists()
    # .invalid never resolves (RFC 2606), so this fails fast with or without internet.
    env = {**os.environ, "DOCKER_FROM": "registry.invalid/none/pytorch:0"}
    r = run(["bash", "scripts/build-image.sh", "base", "docker"], timeout=300, env=env)
    assert r.returncode != 0
    line = last_line(r.stderr)
    assert "could not fetch docker://registry.invalid/none/pytorch:0" in line
    assert "BASE=local" in line
    assert (build / "base-docker.sif").exists() == existed
    assert no_temp_files(build) == []


def test_interrupted_build_leaves_nothing(image: Path, tmp_path: Path) -> None:
    out = tmp_path / "interrupted.sif"
    log = REPO / "build" / "logs" / "interrupted.sif.log"
    log.unlink(missing_ok=True)
    proc = subprocess.Popen(["bash", "scripts/build-image.sh", "image", "local", str(out)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    deadline = time.monotonic() + 120
    # Interrupt (like Ctrl-C on the terminal) once apptainer is inside %post.
    while "Running post scriptlet" not in (log.read_text() if log.exists() else ""):
        assert proc.poll() is None and time.monotonic() < deadline, "build never reached %post"
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGINT)
    proc.communicate(timeout=120)
    assert proc.returncode != 0
    assert list(tmp_path.iterdir()) == []


BUILD_USER = "tjscbuild"  # an ordinary account made for this test, with subordinate IDs


def ensure_build_user() -> None:
    """Idempotent: the user, and /etc/subuid + /etc/subgid ranges that --fakeroot maps."""
    if subprocess.run(["id", BUILD_USER], capture_output=True).returncode != 0:
        subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", BUILD_USER], check=True)
    for path in ("/etc/subuid", "/etc/subgid"):
        lines = Path(path).read_text().splitlines() if Path(path).exists() else []
        if not any(line.startswith(BUILD_USER + ":") for line in lines):
            with open(path, "a") as f:
                f.write(f"{BUILD_USER}:300000:65536\n")


def source_copy(top: Path) -> Path:
    """TOP/repo: the checkout's sources as git sees them (tests/helpers/srccopy.py), for the
    build user (whose build must not see or write the checkout's own build/)."""
    return copy_sources(top / "repo")


def test_fakeroot_build_as_unprivileged_user(image: Path) -> None:
    """FAKEROOT=1: an ordinary user builds the launcher layer on the (root-built) base with
    `apptainer build --fakeroot`, and the image passes its %test, as on sites without root."""
    ensure_build_user()
    top = Path(tempfile.mkdtemp(prefix="build-image-fakeroot-", dir="/tmp"))
    try:
        copy = source_copy(top)
        (copy / "build").mkdir()
        try:  # the root-built base, read-only (the checkout's parents may be closed to the user)
            os.link(BASE, copy / "build" / "base-local.sif")
        except OSError:
            shutil.copy(BASE, copy / "build" / "base-local.sif")
        subprocess.run(["chown", "-R", f"{BUILD_USER}:", str(top)], check=True)
        out = copy / "fakeroot.sif"
        r = subprocess.run(["runuser", "-u", BUILD_USER, "--", "env", f"HOME=/home/{BUILD_USER}",
                            "FAKEROOT=1", "bash", "scripts/build-image.sh", "image", "local",
                            str(out)], cwd=copy, capture_output=True, text=True, timeout=900)
        log = copy / "build" / "logs" / "fakeroot.sif.log"
        assert r.returncode == 0, r.stdout + r.stderr + (log.read_text()[-3000:] if log.exists() else "")
        assert f"build-image: wrote {out}" in r.stdout
        assert out.stat().st_uid != 0  # written by the user, not by root
        # build-image.sh ran the image's %test as that user before it renamed the output
        test_log = (copy / "build" / "logs" / "image.test.log").read_text()
        assert "ALLREDUCE_OK world_size=2 sum=3" in test_log.splitlines(), test_log[-2000:]
        labels = json.loads(run(["apptainer", "inspect", "--json", "--labels", str(out)]).stdout)
        assert labels["data"]["attributes"]["labels"]["org.torchrun-jsc.launcher-version"] == \
            launcher.__version__
    finally:
        shutil.rmtree(top, ignore_errors=True)
