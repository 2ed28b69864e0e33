"""Ring 3: the Horovod image (containers/horovod.def) built on the local base, for real.

`make horovod-image` builds it once (~3-4 min on 2 cores, cached afterwards); %test runs
`horovodrun --check-build` and a checked 2-rank allreduce under mpirun and under gloo.
Fails, never skips, when apptainer, root or the host's mpirun are missing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HOROVOD = REPO / "horovod.sif"
CHECK = "/opt/torchrun-jsc/horovod_check.py"


def run(cmd: list[str], timeout: float = 300, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout, **kw)


@pytest.fixture(scope="module")
def horovod() -> Path:
    assert shutil.which("apptainer"), "apptainer not on PATH: run `bash scripts/setup.sh` as root"
    assert os.geteuid() == 0, "image builds need root here (see docs/development/containers.md for --fakeroot)"
    r = run(["make", "horovod-image"], timeout=2400)
    assert r.returncode == 0, f"make horovod-image failed:\n{r.stdout}\n{r.stderr}"
    return HOROVOD


def test_horovod_image_test_passes(horovod: Path) -> None:
    r = run(["apptainer", "test", str(horovod)], timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    for part in ("PyTorch", "MPI", "Gloo"):
        assert f"[X] {part}" in r.stdout
    assert "HOROVOD_OK size=2 sum=3 controller=mpi params_identical=True" in r.stdout
    assert "HOROVOD_OK size=2 sum=3 controller=gloo params_identical=True" in r.stdout


def test_horovod_labels_are_true(horovod: Path) -> None:
    r = run(["apptainer", "inspect", "--labels", "--json", str(horovod)], timeout=60)
    assert r.returncode == 0, r.stderr
    labels = json.loads(r.stdout)["data"]["attributes"]["labels"]
    r = run(["apptainer", "exec", str(horovod), "python3", "-c",
             "import horovod, torch; print(horovod.__version__, torch.__version__)"], timeout=120)
    assert r.returncode == 0, r.stderr
    hvd_version, torch_version = r.stdout.split()
    assert labels["org.torchrun-jsc.horovod-version"] == hvd_version == "0.28.1"
    assert labels["org.torchrun-jsc.torch-version"] == torch_version


def test_host_mpirun_starts_ranks_in_image(horovod: Path) -> None:
    """The hybrid model jobs use: the host's Open MPI launches ranks inside the image."""
    mpirun = shutil.which("mpirun")
    assert mpirun, "host mpirun missing: run `bash scripts/setup.sh` (openmpi-bin)"
    host = run([mpirun, "--version"], timeout=60).stdout.splitlines()[0].split()[-1]
    inside = run(["apptainer", "exec", str(horovod), "mpirun", "--version"], timeout=60)
    assert inside.stdout.splitlines()[0].split()[-1] == host, "Open MPI versions differ"
    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    r = run([mpirun, "-np", "2", "--oversubscribe", "apptainer", "exec", str(horovod), "python3", CHECK],
            timeout=300, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "HOROVOD_OK size=2 sum=3 controller=mpi params_identical=True" in r.stdout
