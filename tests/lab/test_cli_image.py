"""Ring 3: `python -m launcher check --image` runs the real image (Apptainer) and says what it
has, or in one line what it lacks: the kit's image passes, the lab's base image (torch, no kit)
passes a torchrun spec (the kit comes from the kit) and fails an accelerate spec in one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def check(spec: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "launcher", "check", "--image", spec], cwd=REPO,
                          capture_output=True, text=True, timeout=300, check=False)


def test_check_image_runs_the_image(tmp_path):
    # Build (or find up to date) the image with the project's own target; fail, never skip.
    built = subprocess.run(["make", "image"], cwd=REPO, capture_output=True, text=True,
                           timeout=1200, check=False)
    assert built.returncode == 0, f"make image failed:\n{built.stdout}\n{built.stderr}"
    done = check("jobs/ddp_container.yaml")
    assert done.returncode == 0, done.stderr
    assert "image: python3 3.11, torch 2.13.0+cpu, arch x86_64 (label))" in done.stdout, \
        done.stdout
    base = (REPO / "jobs/ddp_container.yaml").read_text().replace("image.sif",
                                                                   "build/base-local.sif")
    (tmp_path / "base.yaml").write_text(base)
    done = check(str(tmp_path / "base.yaml"))
    assert done.returncode == 0, done.stderr
    acc = (REPO / "jobs/sum_accelerate.yaml").read_text().replace("launchers.sif",
                                                                  "build/base-local.sif")
    (tmp_path / "acc.yaml").write_text(acc)
    done = check(str(tmp_path / "acc.yaml"))
    assert done.returncode == 1, done.stdout
    assert done.stderr.splitlines() == [
        "build/base-local.sif: no accelerate on its PATH: use an image that has them (any "
        "image with python3 >= 3.8 and torch >= 1.9: the kit's own code is bound in from the "
        "kit)"], done.stderr
