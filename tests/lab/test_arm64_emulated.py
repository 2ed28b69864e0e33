"""Ring 3, outside `make test` (marker `emulated`; `make test-arm64` builds the image and runs
it): a 2-node torchrun_jsc job (gloo) in the arm64 image on the lab's x86_64 nodes, under
qemu-user emulation (issue 29). The image is `make base-image ARCH=arm64` (Debian + PyPI's
aarch64 torch, no kit): torchrun_jsc and the stack hook come from the kit, bound in, and run
as aarch64 code. The job starts only because it was asked to (TORCHRUN_JSC_EMULATE=1, one
warning line); the ranks run as aarch64, the all_reduce is right, and torchrun_jsc decided the
rendezvous on the inter-node name. Without the variable the same image is refused
(tests/lab/test_foreign_image.py)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.emulated

REPO = Path(__file__).resolve().parents[2]
PY = str(Path(os.environ.get("VENV", REPO / ".venv")) / "bin" / "python")
IMAGE = REPO / "build" / "base-cuda-arm64.sif"
SPEC = """\
job:
  nodes: 2
  time: "00:30:00"
  partition: batch
site: jsc
runtime:
  kind: apptainer
  image: build/base-cuda-arm64.sif
launch:
  mode: torchrun
  procs_per_node: 1
program: [python3, -u, tests/helpers/programs/which_launcher.py]
"""


def test_two_node_job_in_the_arm64_image_under_emulation(cluster, shared_tmp):
    assert IMAGE.is_file(), f"{IMAGE} missing: make base-image ARCH=arm64 (make test-arm64)"
    spec = shared_tmp / "arm64.yaml"
    spec.write_text(SPEC)
    job = shared_tmp / "arm64.job"
    done = subprocess.run([PY, "-m", "launcher", "render", str(spec), "-o", str(job)],
                          cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    res = cluster.run_job(str(job), ["-o", str(shared_tmp / "arm64-%j.out")], timeout=1500,
                          cwd=str(REPO), env={**os.environ, "TORCHRUN_JSC_EMULATE": "1"})
    assert res.state == "COMPLETED", res.output
    assert f"warning: {IMAGE.relative_to(REPO)} runs emulated (TORCHRUN_JSC_EMULATE=1, " \
        "/proc/sys/fs/binfmt_misc/qemu-aarch64): many times slower than on an aarch64 node" \
        in res.output, res.output
    found = [line.split("FOREIGN_SUMMARY ", 1)[1] for line in res.output.splitlines()
             if "FOREIGN_SUMMARY " in line]
    assert len(found) == 1, res.output
    got = json.loads(found[0])
    assert got["ok"] and got["world_size"] == 2 and got["hosts"] == ["jwb0001", "jwb0002"], got
    assert got["machines"] == ["aarch64"], got
    assert "torchrun_jsc: endpoint=jwb0001i:" in res.output, res.output
