"""A copy of the checkout's sources as git sees them, for tests that install or build from a
copy: the tracked files and new ones that are not ignored. Not builds, caches, venvs, the jobs'
output (.hangs, *.out) or scripts/build-image.sh's half-written outputs (.NAME.tmp.PID,
.enroot-tree.*): the other lanes write and remove those while a copy runs (CI run 11: a copy
failed on an Enroot image's unpacked tree that vanished under it)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def copy_sources(dst: Path, root: Path = REPO) -> Path:
    listed = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], capture_output=True, check=True,
                            timeout=60).stdout.decode()
    for name in filter(None, listed.split("\0")):
        src = root / name
        if not src.exists() and not src.is_symlink():
            continue  # deleted in the work tree (or by another lane) since git listed it
        target = dst / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target, follow_symlinks=False)
    return dst
