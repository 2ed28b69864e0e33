"""Ring 1: the repository holds sources, not build outputs.

A half-written image (.horovod.sif.tmp.PID, 554 MB) once slipped into a commit during a
build and made a whole submission too big to land. Every tracked file stays small, and the
build's temporary names are ignored by git.
"""

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 1 << 20  # 1 MiB: the largest source here is well under 100 KiB


def test_no_tracked_file_is_large():
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                           check=True).stdout.decode().split("\0")
    big = [(f, (ROOT / f).stat().st_size) for f in files if f and (ROOT / f).is_file()
           and (ROOT / f).stat().st_size > LIMIT]
    assert not big, f"tracked files over {LIMIT} bytes: {big}"


@pytest.mark.parametrize("name", [".horovod.sif.tmp.32187", ".image.sif.tmp.1", "image.sif",
                                  "launchers.sqsh", "build/base-local.sif", "site/index.html",
                                  "x.tmp"])
def test_build_outputs_are_ignored(name):
    p = subprocess.run(["git", "check-ignore", "-q", "--no-index", name], cwd=ROOT)
    assert p.returncode == 0, f"{name} is not ignored by .gitignore"
