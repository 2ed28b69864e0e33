"""Ring 3: the unprivileged base (`BASE=ngc`, JUPITER's path without root) built for real by an
ordinary user with `FAKEROOT=1 make image BASE=ngc`, from a local stand-in for NGC's registry
image: an OCI archive (`NGC_FROM=oci-archive:PATH`) of the lab's own base-local.sif root
filesystem with a Docker ENV (tests/helpers/oci_archive.py; made once per base, about 2 min,
then cached in build/ngc-standin/). The lab cannot reach nvcr.io, so NGC's own image is not
built here. Checked: both layers are written by the user and pass their %test (torch, verbs,
the 2-process all_reduce), the base label names the archive, and /etc/environment carries the
image's ENV for Enroot (without the values Enroot cannot read: spaces)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.lab.test_image import (BASE, BUILD_USER, REPO, ensure_build_user, make,
                                  source_copy)

STANDIN_DIR = REPO / "build" / "ngc-standin"
ENV = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
       "NVIDIA_VISIBLE_DEVICES=all", "PYTORCH_VERSION=2.13.0",
       "TORCH_CUDA_ARCH_LIST=8.0 9.0"]  # NGC's own has spaces: Apptainer-only


def standin() -> Path:
    """The OCI archive of build/base-local.sif, remade when the base or ENV changes."""
    make("base-image")
    st = BASE.stat()
    env_sum = hashlib.md5("\n".join(ENV).encode()).hexdigest()[:8]
    key = f"{st.st_size}-{st.st_mtime_ns}-{env_sum}"
    archive = STANDIN_DIR / "standin.oci.tar"
    stamp = STANDIN_DIR / f".complete-{key}"
    if not (stamp.exists() and archive.exists()):
        shutil.rmtree(STANDIN_DIR, ignore_errors=True)
        STANDIN_DIR.mkdir(parents=True)
        r = subprocess.run([sys.executable, str(REPO / "tests/helpers/oci_archive.py"), str(BASE),
                            str(archive), *ENV], capture_output=True, text=True, timeout=900)
        assert r.returncode == 0, r.stdout + r.stderr
        stamp.touch()
    STANDIN_DIR.chmod(0o755)
    archive.chmod(0o644)
    return archive


def test_fakeroot_user_builds_ngc_base_and_image_from_an_archive() -> None:
    archive = standin()
    ensure_build_user()
    top = Path(tempfile.mkdtemp(prefix="build-image-ngc-", dir="/tmp"))
    try:
        copy = source_copy(top)
        subprocess.run(["chown", "-R", f"{BUILD_USER}:", str(top)], check=True)
        # The archive's directory must be reachable for the user (the checkout may not be).
        readable = subprocess.run(["runuser", "-u", BUILD_USER, "--", "test", "-r", str(archive)])
        if readable.returncode != 0:
            shutil.copy(archive, top / "standin.oci.tar")
            os.chmod(top / "standin.oci.tar", 0o644)
            archive = top / "standin.oci.tar"
        r = subprocess.run(["runuser", "-u", BUILD_USER, "--", "env", f"HOME=/home/{BUILD_USER}",
                            "FAKEROOT=1", f"NGC_FROM=oci-archive:{archive}", "make", "image",
                            "BASE=ngc"], cwd=copy, capture_output=True, text=True, timeout=1200)
        logs = copy / "build" / "logs"
        tail = "".join(p.read_text()[-2000:] for p in sorted(logs.glob("*.log"))) \
            if logs.is_dir() else ""
        assert r.returncode == 0, r.stdout + r.stderr + tail
        base, image = copy / "build" / "base-ngc.sif", copy / "image-ngc.sif"
        for out in (base, image):
            assert f"build-image: wrote {out}" in r.stdout, r.stdout
            assert out.stat().st_uid != 0  # the user's, not root's
        assert "ALLREDUCE_OK world_size=2 sum=3" in \
            (logs / "image-ngc.test.log").read_text().splitlines()
        labels = json.loads(subprocess.run(
            ["apptainer", "inspect", "--json", "--labels", str(image)], capture_output=True,
            text=True, timeout=60, check=True).stdout)["data"]["attributes"]["labels"]
        assert labels["org.torchrun-jsc.base"] == f"oci-archive:{archive}"
        env = subprocess.run(["apptainer", "exec", str(image), "cat", "/etc/environment"],
                             capture_output=True, text=True, timeout=120, check=True).stdout
        lines = env.splitlines()
        assert {"PYTORCH_VERSION=2.13.0", "NVIDIA_VISIBLE_DEVICES=all", "LC_ALL=C.UTF-8"} <= \
            set(lines), env
        assert not any(ln.startswith("TORCH_CUDA_ARCH_LIST=") for ln in lines), env
    finally:
        shutil.rmtree(top, ignore_errors=True)
