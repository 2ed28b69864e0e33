"""Ring 3: the launchers layer (containers/launchers.def -> launchers.sif), built for real.

`make launchers-image` builds it as users do (the local base and image.sif first when they are
missing or stale; the layer itself ~30 s plus its %test on 2 cores), offline from the
wheelhouse scripts/build-image.sh fills on the host. Checked: the image holds exactly the pins
of requirements/launchers.txt, imports them with the image's own torch, runs each launcher's
command line, and says so in its labels. Fails, never skips, without apptainer or root.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LAUNCHERS_SIF = REPO / "launchers.sif"
IMAGE = REPO / "image.sif"
BUILD_TIMEOUT = 2400  # cold: base (debootstrap + torch), image.sif, wheelhouse, this layer


def run(cmd: list[str], timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout,
                          check=False)


def pins() -> dict[str, str]:
    out = {}
    for line in (REPO / "requirements/launchers.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            out[name] = version
    return out


@pytest.fixture(scope="module")
def image() -> Path:
    assert shutil.which("apptainer"), "apptainer not on PATH: run `bash scripts/setup.sh` as root"
    assert os.geteuid() == 0, "image builds need root here (see docs/development/containers.md for --fakeroot)"
    r = run(["make", "launchers-image"], timeout=BUILD_TIMEOUT)
    assert r.returncode == 0, f"make launchers-image failed:\n{r.stdout}\n{r.stderr}"
    return LAUNCHERS_SIF


def test_apptainer_test_passes_and_reports_the_pinned_versions(image: Path) -> None:
    r = run(["apptainer", "test", str(image)], timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    p = pins()
    assert f"pins ok: {len(p)} from /opt/torchrun-jsc/launchers.txt" in r.stdout.splitlines()
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("LAUNCHERS_IMPORT_OK "))
    fields = line.split()[1:]
    got = dict(zip(fields[::2], fields[1::2]))
    assert {k: got[k] for k in ("accelerate", "deepspeed", "ray", "submitit")} == {
        k: p[k] for k in ("accelerate", "deepspeed", "ray", "submitit")}
    assert f"ray, version {p['ray']}" in r.stdout.splitlines()


def test_torch_is_the_one_image_sif_has(image: Path) -> None:
    """The layer adds the launchers and leaves torch (and numpy) as image.sif has them."""
    code = "import torch, numpy; print(torch.__version__, numpy.__version__)"
    inner = run(["apptainer", "exec", str(image), "python3", "-c", code], timeout=120)
    outer = run(["apptainer", "exec", str(IMAGE), "python3", "-c", code], timeout=120)
    assert inner.returncode == outer.returncode == 0, inner.stderr + outer.stderr
    assert inner.stdout == outer.stdout


def test_launchers_import_and_run_for_an_ordinary_user(image: Path, tmp_path: Path) -> None:
    """What a job does: the launchers' command lines and imports, as a non-root user whose
    $HOME Apptainer mounts (nothing in the image may need writing)."""
    script = ("set -e; accelerate launch --help >/dev/null; deepspeed --help >/dev/null; "
              "ray --version; python3 -c 'import accelerate, deepspeed, ray, submitit, "
              "torch.distributed; print(\"IMPORT_OK\", submitit.__version__)'")
    r = run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "apptainer", "exec",
             "--containall", str(image), "bash", "-c", script], timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"IMPORT_OK {pins()['submitit']}" in r.stdout.splitlines()


def test_labels_name_each_launcher_as_installed(image: Path) -> None:
    r = run(["apptainer", "inspect", "--labels", "--json", str(image)], timeout=60)
    assert r.returncode == 0, r.stderr
    labels = json.loads(r.stdout)["data"]["attributes"]["labels"]
    p = pins()
    for name in ("accelerate", "deepspeed", "ray", "submitit"):
        assert labels[f"org.torchrun-jsc.{name}-version"] == p[name]
    assert labels["org.torchrun-jsc.base"] == "image.sif"
    assert labels["org.torchrun-jsc.torch-version"].startswith("2.13.0")
