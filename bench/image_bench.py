"""Bench section: image build times and sizes (scripts/build-image.sh via make).

Full local-base build (debootstrap + torch wheel) vs a launcher-only rebuild (the thin
`Bootstrap: localimage` layer, after a launcher source changed), and image size vs base.
"""

from __future__ import annotations

import os
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
    full = Series("full", [_timed(["bash", "scripts/build-image.sh", "base", "local"])])
    layer = Series("layer", [])
    for _ in range(repeats):
        os.utime(ROOT / "launcher" / "__init__.py")  # a launcher change, as make sees it
        layer.values.append(_timed(["make", "-s", "image"]))
    base_mb = (ROOT / "build" / "base-local.sif").stat().st_size / 2**20
    image_mb = (ROOT / "image.sif").stat().st_size / 2**20
    return table(["image", "time / size", "ratio"], [
        ["full local-base build (debootstrap + torch wheel)", full.cell("s"), "1.00x"],
        ["launcher-only rebuild (`make image` after a launcher change, incl. `apptainer test`)",
         layer.cell("s"), ratio(layer, full)],
        ["base-local.sif size", f"{base_mb:.0f} MiB", "1.00x"],
        ["image.sif size", f"{image_mb:.0f} MiB", f"{image_mb / base_mb:.2f}x"],
    ])
