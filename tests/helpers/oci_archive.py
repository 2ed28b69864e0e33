"""An OCI image archive (`oci-archive:` for Apptainer, skopeo, podman) made from a SIF's root
filesystem: a local stand-in for a registry image such as NGC's, with the Docker `ENV` it is
given. One uncompressed layer; nothing downloaded.

    python3 tests/helpers/oci_archive.py IMAGE.sif OUT.tar [KEY=VALUE ...]
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, Sequence


def _blob(blobs: Path, data: bytes) -> Dict[str, object]:
    digest = hashlib.sha256(data).hexdigest()
    (blobs / digest).write_bytes(data)
    return {"digest": f"sha256:{digest}", "size": len(data)}


def _file_blob(blobs: Path, path: Path) -> Dict[str, object]:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    digest = h.hexdigest()
    size = path.stat().st_size
    path.rename(blobs / digest)
    return {"digest": f"sha256:{digest}", "size": size}


def copy_partition(sif: Path, pid: str, out: Path) -> None:
    """The SIF's partition ``pid`` into ``out`` by its offset and size (`apptainer sif info`).
    Not `apptainer sif dump`: Apptainer 1.4.5 sent part of an lz4 image's partition to stderr
    (CI run 11; scripts/build-image.sh cmd_enroot)."""
    info = subprocess.run(["apptainer", "sif", "info", pid, str(sif)], capture_output=True,
                          text=True, check=True).stdout
    fields = dict(ln.strip().split(":", 1) for ln in info.splitlines() if ":" in ln)
    offset, left = int(fields["Offset"]), int(fields["Size"])
    with open(sif, "rb") as src, open(out, "wb") as dst:
        src.seek(offset)
        while left:
            chunk = src.read(min(left, 1 << 22))
            if not chunk:
                raise SystemExit(f"oci_archive: {sif} ends inside partition {pid}")
            dst.write(chunk)
            left -= len(chunk)


def sif_to_oci_archive(sif: Path, out: Path, env: Sequence[str], arch: str = "amd64") -> None:
    work = Path(tempfile.mkdtemp(prefix="oci-archive-", dir=str(out.parent)))
    try:
        listing = subprocess.run(["apptainer", "sif", "list", str(sif)], capture_output=True,
                                 text=True, check=True).stdout
        ids = [ln.split("|")[0].strip() for ln in listing.splitlines()
               if "FS (Squashfs/*System" in ln]
        if not ids:
            raise SystemExit(f"oci_archive: no root filesystem partition in {sif}")
        squash = work / "rootfs.sqsh"
        copy_partition(sif, ids[0], squash)
        root = work / "root"
        subprocess.run(["unsquashfs", "-q", "-n", "-d", str(root), str(squash)], check=True,
                       stdout=subprocess.DEVNULL)
        squash.unlink()
        # What Apptainer adds is not part of a registry image.
        for name in (".singularity.d", "singularity", "environment", ".exec", ".run", ".shell",
                     ".test"):
            p = root / name
            if p.is_symlink() or p.is_file():
                p.unlink()
            elif p.is_dir():
                shutil.rmtree(p)
        layout = work / "layout"
        blobs = layout / "blobs" / "sha256"
        blobs.mkdir(parents=True)
        layer = work / "layer.tar"
        subprocess.run(["tar", "--numeric-owner", "-C", str(root), "-cf", str(layer), "."],
                       check=True)
        shutil.rmtree(root)
        layer_desc = _file_blob(blobs, layer)
        config = {"architecture": arch, "os": "linux",
                  "config": {"Env": list(env), "Cmd": ["/bin/bash"]},
                  "rootfs": {"type": "layers", "diff_ids": [layer_desc["digest"]]}}
        config_desc = _blob(blobs, json.dumps(config).encode())
        manifest = {"schemaVersion": 2,
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                               **config_desc},
                    "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                                **layer_desc}]}
        manifest_desc = _blob(blobs, json.dumps(manifest).encode())
        index = {"schemaVersion": 2, "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json", **manifest_desc,
            "platform": {"architecture": arch, "os": "linux"},
            "annotations": {"org.opencontainers.image.ref.name": "latest"}}]}
        (layout / "index.json").write_text(json.dumps(index))
        (layout / "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}))
        tmp = out.with_name(f".{out.name}.tmp")
        # Member names without "./": Apptainer refuses "./" as an extraction path.
        subprocess.run(["tar", "-C", str(layout), "-cf", str(tmp), "oci-layout", "index.json",
                        "blobs"], check=True)
        tmp.rename(out)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    sif_to_oci_archive(Path(sys.argv[1]), Path(sys.argv[2]).resolve(), sys.argv[3:])
