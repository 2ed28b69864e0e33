"""Two registry images with an ENTRYPOINT, imported by Enroot from a registry, for
tests/lab/test_entrypoint_images.py (issue 34, item 4):

- ``build/entry-banner.sqsh``: its entrypoint prints a banner and execs the command (NGC's
  /opt/nvidia/nvidia_entrypoint.sh does that);
- ``build/entry-nonexec.sqsh``: its entrypoint runs something of its own and never the command
  (a service image's), then exits 0.

Both are the lab's base (``build/base-local.sif``: Debian + torch, no kit; without C++
headers and docs, LEFT_OUT) as one gzip layer plus the entrypoint as a second, with a config
carrying Entrypoint, Cmd, WorkingDir, the base's environment and a history, written here as
an OCI image layout, pushed with ``skopeo copy --format v2s2`` (Docker's manifest v2 schema 2,
the form NGC serves and Enroot documents) to a real registry (Debian's ``docker-registry``,
distribution 2.8) on 127.0.0.1, and imported with
``enroot import docker://127.0.0.1:PORT#entry/NAME:1`` (ENROOT_ALLOW_HTTP). That is Enroot's
registry path, the one a user's ``enroot import docker://nvcr.io#...`` takes: manifest, config
and blobs over HTTP, the layers extracted, and docker::configure writing the entrypoint into
/etc/rc. A ``dockerd://`` or ``podman://`` import needs a container daemon and ends in the
same docker::configure; a hand-written /etc/rc would test nothing of Enroot's.

Two facts of Enroot 4.1.2 against a registry without authentication shape the images: its
first request (the permission probe, no Accept header) makes distribution answer an OCI
manifest with 404 (NVIDIA/enroot#277) and convert a schema-2 one to schema 1, which needs the
config's history. Hence schema 2 with history; gzip, as schema 2 has no zstd layers.

Rebuilt when missing or older than the base or this file; one build at a time (flock). By
hand: ``python -m tests.helpers.entrypoint_images`` (prints the times of each step).
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import json
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Dict, List

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "build"
BASE = BUILD / "base-local.sif"
MARK = "ENTRYPOINT-"  # every line the entrypoints print starts with it
ENTRYPOINT = "/usr/local/bin/entrypoint.sh"
SCRIPTS = {
    "banner": (
        "#!/bin/sh\n"
        "# Like NGC's nvidia_entrypoint.sh: a banner, then the command.\n"
        f"echo '{MARK}BANNER: === lab image with a banner entrypoint ==='\n"
        'exec "$@"\n'),
    "nonexec": (
        "#!/bin/sh\n"
        "# A service image's entrypoint: its own program, never the command.\n"
        f'echo "{MARK}NONEXEC: the image\'s own program ran instead of: $*"\n'
        "exit 0\n"),
}
IMAGES = {name: BUILD / f"entry-{name}.sqsh" for name in SCRIPTS}
# Left out of the base's layer: 40 % of its files, none of which a rank imports (C++ headers,
# documentation). Every node unpacks and later removes each image twice (an Enroot and a pyxis
# container), and the files' count is most of that time.
LEFT_OUT = ("usr/local/lib/python3*/dist-packages/torch/include", "usr/share/doc",
            "usr/share/man", "usr/share/locale")
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"


def images() -> Dict[str, Path]:
    """The two squashfs images, built or found up to date (the base must exist)."""
    assert BASE.exists(), f"{BASE} missing: make build/base-local.sif"
    BUILD.mkdir(exist_ok=True)
    with open(BUILD / ".lock-entry-images", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        newest_input = max(BASE.stat().st_mtime, Path(__file__).stat().st_mtime)
        if any(not p.exists() or p.stat().st_mtime < newest_input for p in IMAGES.values()):
            build()
    return dict(IMAGES)


def run(argv: List[str], timeout: float = 300, **kw) -> subprocess.CompletedProcess:
    p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False, **kw)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: rc {p.returncode}\n"
                           f"{p.stdout[-3000:]}{p.stderr[-3000:]}")
    return p


def blob(layout: Path, data_path: Path = None, data: bytes = None) -> Dict:
    """Move a file (or write bytes) into the layout's blobs; its descriptor digest and size."""
    digest = hashlib.sha256()
    if data is None:
        with open(data_path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
    else:
        digest.update(data)
    dest = layout / "blobs/sha256" / digest.hexdigest()
    dest.parent.mkdir(parents=True, exist_ok=True)
    if data is None:
        os.replace(data_path, dest)
    else:
        dest.write_bytes(data)
    return {"digest": "sha256:" + digest.hexdigest(), "size": dest.stat().st_size}


def gzip_layer(layout: Path, tar_cmd: List[str] = None, tar_bytes: bytes = None) -> Dict:
    """A gzip layer blob from a tar stream; its descriptor plus the diff_id (uncompressed)."""
    out = layout / "layer.tmp"
    src = subprocess.Popen(tar_cmd, stdout=subprocess.PIPE) if tar_cmd else None
    diff = hashlib.sha256()
    with open(out, "wb") as f:
        z = subprocess.Popen(["pigz", "-1", "-p", "2", "-n", "-c"], stdin=subprocess.PIPE, stdout=f)
        stream = src.stdout if src else io.BytesIO(tar_bytes)
        for chunk in iter(lambda: stream.read(1 << 20), b""):
            diff.update(chunk)
            z.stdin.write(chunk)
        z.stdin.close()
        assert z.wait() == 0 and (src is None or src.wait() == 0), "tar | pigz failed"
    desc = dict(mediaType=OCI_LAYER, **blob(layout, out))
    return {"desc": desc, "diff_id": "sha256:" + diff.hexdigest()}


def script_tar(text: str) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in ("usr", "usr/local", "usr/local/bin"):
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        info = tarfile.TarInfo(ENTRYPOINT.lstrip("/"))
        info.mode, info.size = 0o755, len(text.encode())
        tar.addfile(info, io.BytesIO(text.encode()))
    return buf.getvalue()


def oci_layout(tmp: Path) -> Path:
    """The OCI image layout: the base's root filesystem (one layer, shared) and per image its
    entrypoint layer and config; tagged banner and nonexec."""
    layout = tmp / "oci"
    (layout / "blobs/sha256").mkdir(parents=True)
    (layout / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    rootfs = tmp / "rootfs"
    offset = sif_squashfs_offset(BASE)
    run(["unsquashfs", "-q", "-n", "-o", str(offset), "-d", str(rootfs), str(BASE)])
    env = [line for line in (rootfs / "etc/environment").read_text().splitlines()
           if "=" in line and not line.startswith("#")]
    base = gzip_layer(layout, tar_cmd=["tar", "--numeric-owner", "--sort=name", "--mtime=@0",
                                       *(f"--exclude=./{path}" for path in LEFT_OUT),
                                       "-C", str(rootfs), "-cf", "-", "."])
    shutil.rmtree(rootfs)
    manifests = []
    for name, text in SCRIPTS.items():
        top = gzip_layer(layout, tar_bytes=script_tar(text))
        config = {
            "architecture": "amd64", "os": "linux",
            "config": {"Env": env, "Entrypoint": [ENTRYPOINT], "Cmd": ["/bin/bash"],
                       "WorkingDir": "/workspace",
                       "Labels": {"org.torchrun-jsc.test-image": f"entry-{name}"}},
            "rootfs": {"type": "layers", "diff_ids": [base["diff_id"], top["diff_id"]]},
            # One entry per layer, as `docker build` writes: the registry's answer to a
            # manifest request without an Accept header (Enroot's first, unauthenticated
            # probe) is a schema1 conversion, which needs it.
            "history": [{"created": "1970-01-01T00:00:00Z",
                         "created_by": "the root filesystem of build/base-local.sif"},
                        {"created": "1970-01-01T00:00:00Z",
                         "created_by": f"COPY entrypoint-{name}.sh {ENTRYPOINT}"}],
        }
        cdesc = dict(mediaType="application/vnd.oci.image.config.v1+json",
                     **blob(layout, data=json.dumps(config).encode()))
        manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "config": cdesc, "layers": [base["desc"], top["desc"]]}
        mdesc = dict(mediaType=manifest["mediaType"],
                     **blob(layout, data=json.dumps(manifest).encode()))
        mdesc["annotations"] = {"org.opencontainers.image.ref.name": name}
        manifests.append(mdesc)
    (layout / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": manifests}))
    return layout


def sif_squashfs_offset(sif: Path) -> int:
    """Where the SIF's root filesystem partition starts (apptainer sif list)."""
    for line in run(["apptainer", "sif", "list", str(sif)]).stdout.splitlines():
        cols = [c.strip() for c in line.split("|")]
        if len(cols) == 5 and cols[4].startswith("FS (Squashfs/*System"):
            return int(cols[3].split("-")[0])
    raise RuntimeError(f"no squashfs root filesystem partition in {sif}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Registry:
    """Debian's docker-registry on 127.0.0.1, storage in ``root``, no auth; up until closed."""

    def __init__(self, root: Path):
        assert shutil.which("docker-registry"), "docker-registry missing: run `make setup`"
        self.addr = f"127.0.0.1:{free_port()}"
        conf = root / "registry.yml"
        conf.write_text("version: 0.1\nlog: {level: warn}\n"
                        f"storage: {{filesystem: {{rootdirectory: {root / 'data'}}}}}\n"
                        f"http: {{addr: '{self.addr}'}}\n")
        self.log = open(root / "registry.log", "w")
        self.proc = subprocess.Popen(["docker-registry", "serve", str(conf)], stdout=self.log,
                                     stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while True:  # until it answers the API's base endpoint (or dies, or 30 s)
            try:
                with urllib.request.urlopen(f"http://{self.addr}/v2/", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                log = (root / "registry.log").read_text()[-2000:]
                raise RuntimeError(f"docker-registry did not come up: {log}")
            time.sleep(0.1)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)
        self.log.close()


def scratch() -> Path:
    """Where the unpacked trees go: /dev/shm when it has room (these are IO-bound: unpacking
    and removing 1.2 GB of small files, twice per import), else build/."""
    shm = Path("/dev/shm")
    if shm.is_dir() and shutil.disk_usage(shm).free > 6 << 30:
        return shm
    return BUILD


def build() -> None:
    times = {}
    with tempfile.TemporaryDirectory(prefix="entry-images.", dir=scratch()) as tmp_s:
        tmp = Path(tmp_s)
        t = time.monotonic()
        layout = oci_layout(tmp)
        times["oci_layout_s"] = time.monotonic() - t
        (tmp / "reg").mkdir()
        registry = Registry(tmp / "reg")
        try:
            t = time.monotonic()
            assert shutil.which("skopeo"), "skopeo missing: run `make setup`"
            for name in SCRIPTS:
                run(["skopeo", "--insecure-policy", "copy", "--quiet", "--dest-tls-verify=false",
                     "--format", "v2s2", f"oci:{layout}:{name}",
                     f"docker://{registry.addr}/entry/{name}:1"])
            times["push_s"] = time.monotonic() - t
            # Enroot's own cache and temporary tree, removed with tmp.
            env = dict(os.environ, ENROOT_ALLOW_HTTP="y", ENROOT_CACHE_PATH=str(tmp / "cache"),
                       ENROOT_TEMP_PATH=str(tmp))
            for name, out in IMAGES.items():
                t = time.monotonic()
                part = out.with_name(f".{out.name}.tmp.{os.getpid()}")
                part.unlink(missing_ok=True)
                try:
                    run(["enroot", "import", "-o", str(part),
                         f"docker://{registry.addr}#entry/{name}:1"], timeout=600, env=env)
                    os.replace(part, out)
                finally:
                    part.unlink(missing_ok=True)
                times[f"import_{name}_s"] = time.monotonic() - t
        finally:
            registry.close()
    print("entry images: " + ", ".join(f"{k} {v:.1f}" for k, v in times.items()))


if __name__ == "__main__":
    t0 = time.monotonic()
    got = images()
    print({k: str(v) for k, v in got.items()}, f"{time.monotonic() - t0:.1f} s")
    sys.exit(0)
