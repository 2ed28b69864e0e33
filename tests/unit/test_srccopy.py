"""Ring 1: tests/helpers/srccopy.py copies what git sees: tracked files (modes and symlinks
kept) and new files that are not ignored; never ignored ones (a build's half-written output,
a job's log), and a tracked file gone from the work tree is left out, not an error."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.helpers.srccopy import copy_sources


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def test_copies_what_git_sees(tmp_path):
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    git(repo, "init", "-q")
    (repo / ".gitignore").write_text(".*.tmp.*\n/*.out\n")
    (repo / "scripts" / "run.sh").write_text("echo hi\n")
    (repo / "scripts" / "run.sh").chmod(0o755)
    (repo / "gone.txt").write_text("x\n")
    (repo / "link").symlink_to("scripts/run.sh")
    git(repo, "add", ".")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "t")
    (repo / "gone.txt").unlink()
    (repo / "new.py").write_text("print(1)\n")
    (repo / ".image.sqsh.tmp.123").write_text("half\n")
    (repo / "job-1.out").write_text("log\n")
    dst = copy_sources(tmp_path / "copy", repo)
    found = sorted(str(p.relative_to(dst)) for p in dst.rglob("*"))
    assert found == [".gitignore", "link", "new.py", "scripts", "scripts/run.sh"]
    assert os.access(dst / "scripts" / "run.sh", os.X_OK)
    assert (dst / "link").is_symlink() and os.readlink(dst / "link") == "scripts/run.sh"
