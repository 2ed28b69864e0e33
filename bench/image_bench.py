"""Bench section: image build times and sizes (scripts/build-image.sh via make).

Full local-base build (debootstrap + torch wheel) vs a launcher-only rebuild (the thin
`Bootstrap: localimage` layer, after a launcher source changed), and image size vs base.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Sequence

from bench.stats import Series, ratio, table

ROOT = Path(__file__).resolve().parent.parent


def _timed(argv: Sequence[str]) -> float:
    start = time.monotonic()
    subprocess.run(argv, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    return time.monotonic() - start


def images(repeats: int) -> str:
    scratch = ROOT / "build" / "bench-base.sif"  # leaves the cached base (and images) alone
    try:
        full = Series("full", [_timed(["bash", "scripts/build-image.sh", "base", "local",
                                       str(scratch)])])
    finally:
        scratch.unlink(missing_ok=True)
    # -W: make treats the launcher as changed without touching any file.
    layer = Series("layer", [_timed(["make", "-s", "-W", "launcher/__init__.py", "image"])
                             for _ in range(repeats)])
    base_mb = (ROOT / "build" / "base-local.sif").stat().st_size / 2**20
    image_mb = (ROOT / "image.sif").stat().st_size / 2**20
    return table(["image", "time / size", "ratio"], [
        ["full local-base build (debootstrap + torch wheel)", full.cell("s"), "1.00x"],
        ["launcher-only rebuild (`make image` after a launcher change, incl. `apptainer test`)",
         layer.cell("s"), ratio(layer, full)],
        ["base-local.sif size", f"{base_mb:.0f} MiB", "1.00x"],
        ["image.sif size", f"{image_mb:.0f} MiB", f"{image_mb / base_mb:.2f}x"],
    ])
