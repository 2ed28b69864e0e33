"""Ring 3: every image the kit builds loads rdma-core's libibverbs.so.1 and the mlx5
provider (containers/files/verbs_check.py; the lab has no HCA: 0 devices)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


IMAGES = {"image.sif": "image", "horovod.sif": "horovod-image", "launchers.sif": "launchers-image"}


@pytest.mark.parametrize("image", sorted(IMAGES))
def test_image_loads_verbs_with_mlx5_provider(image: str):
    r = subprocess.run(["make", IMAGES[image]], cwd=REPO, capture_output=True, text=True,
                       timeout=2400)
    assert r.returncode == 0, f"make {IMAGES[image]} failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    p = subprocess.run(["apptainer", "exec", str(REPO / image), "python3",
                        "/opt/torchrun-jsc/verbs_check.py"], capture_output=True, text=True,
                       timeout=300)
    print(image, p.stdout.strip())
    assert p.returncode == 0, p.stdout + p.stderr
    out = p.stdout.strip()
    assert out.startswith("VERBS_OK lib=libibverbs.so.1 ") and " mlx5 " in out
    assert out.endswith("devices=0")  # the lab has no HCA; a node with one lists it
    # numactl for GPU-NUMA placement (torchrun --numa-binding needs it in the image)
    q = subprocess.run(["apptainer", "exec", str(REPO / image), "numactl", "--show"],
                       capture_output=True, text=True, timeout=120)
    assert q.returncode == 0 and "policy:" in q.stdout, q.stdout + q.stderr
