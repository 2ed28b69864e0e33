"""Ring 3: `python -m launcher check --image` reads the real image's labels with spython."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from launcher import __version__

REPO = Path(__file__).resolve().parents[2]


def test_check_image_finds_launcher_label():
    # Build (or find up to date) the image with the project's own target; fail, never skip.
    built = subprocess.run(["make", "image"], cwd=REPO, capture_output=True, text=True,
                           timeout=1200, check=False)
    assert built.returncode == 0, f"make image failed:\n{built.stdout}\n{built.stderr}"
    done = subprocess.run([sys.executable, "-m", "launcher", "check", "--image",
                           "jobs/ddp_container.yaml"], cwd=REPO, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert f"image label org.torchrun-jsc.launcher-version={__version__})" in done.stdout
