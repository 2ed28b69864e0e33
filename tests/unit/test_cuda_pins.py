"""Ring 1: the CUDA base's pins stay consistent (requirements/cuda.txt, requirements/cuda-debian.txt,
containers/base-cuda.def, scripts/build-image.sh), checked without building.

The image's labels say which torch, CUDA and NCCL it carries; scripts/build-image.sh derives
them from the pins and the image's %test (containers/files/cuda_check.py) compares them with
what torch reports. These tests catch a pin edited in one place only, before a multi-GB build.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.test_image_defs import declared_args, script_args, sections

REPO = Path(__file__).resolve().parents[2]
REQ = REPO / "requirements" / "cuda.txt"
DEBS = REPO / "requirements" / "cuda-debian.txt"
DEF = (REPO / "containers" / "base-cuda.def").read_text()
SCRIPT = REPO / "scripts" / "build-image.sh"
CHECK = REPO / "containers" / "files" / "cuda_check.py"


def pins() -> dict[str, str]:
    found = {}
    for line in REQ.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, sep, version = line.partition("==")
            assert sep and re.fullmatch(r"[A-Za-z0-9_.-]+", name) and re.fullmatch(r"[\w.]+", version), \
                f"requirements/cuda.txt: expected NAME==VERSION, got {line!r}"
            assert name.lower() not in found, f"requirements/cuda.txt pins {name} twice"
            found[name.lower()] = version
    return found


def script_pin(name: str) -> str:
    """The script's own pin() on the real file (what the build passes as labels)."""
    text = SCRIPT.read_text()
    fn = re.search(r"^pin\(\) \{\n.*?^\}", text, re.M | re.S).group(0)
    r = subprocess.run(["bash", "-c", f'die() {{ echo "$*" >&2; exit 1; }}\nrepo={REPO}\n'
                        f'CUDA_REQ={REQ}\n{fn}\npin "$1"', "bash", name],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def test_torch_is_the_2_13_cuda_13_build_with_its_nccl() -> None:
    p = pins()
    assert p["torch"] == "2.13.0"
    cuda = ".".join(p["cuda-toolkit"].split(".")[:2])
    assert cuda == "13.0" and p["nvidia-cuda-runtime"].startswith(cuda + ".")
    # every CUDA library wheel is built for the same CUDA major release
    assert all(not n.endswith(("-cu12", "-cu11")) for n in p)
    assert "nvidia-nccl-cu13" in p and "nvidia-cudnn-cu13" in p


def test_definition_defaults_equal_the_pins() -> None:
    args = dict(line.strip().split("=", 1) for line in sections(DEF)["arguments"].splitlines()
                if "=" in line)
    p = pins()
    assert args["TORCH_VERSION"] == p["torch"]
    assert args["CUDA_VERSION"] == ".".join(p["cuda-toolkit"].split(".")[:2])
    assert args["NCCL_VERSION"] == p["nvidia-nccl-cu13"]


def test_script_derives_the_labels_from_the_pins() -> None:
    assert script_pin("torch") == pins()["torch"]
    assert script_pin("nvidia-nccl-cu13") == "2.29.7"
    text = SCRIPT.read_text()
    assert '"TORCH_VERSION=$(pin torch)"' in text
    assert '"CUDA_VERSION=$(pin cuda-toolkit | cut -d. -f1,2)"' in text
    assert '"NCCL_VERSION=$(pin nvidia-nccl-cu13)"' in text


def test_a_missing_pin_is_one_line(tmp_path) -> None:
    text = SCRIPT.read_text()
    fn = re.search(r"^pin\(\) \{\n.*?^\}", text, re.M | re.S).group(0)
    req = tmp_path / "cuda.txt"
    req.write_text("torch==2.13.0\n")
    r = subprocess.run(["bash", "-c", f'die() {{ echo "build-image: $*" >&2; exit 1; }}\n'
                        f'repo={tmp_path}\nCUDA_REQ={req}\n{fn}\npin nvidia-nccl-cu13'],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and r.stderr.count("\n") == 1
    assert "cuda.txt pins no nvidia-nccl-cu13" in r.stderr


def test_script_passes_what_the_cuda_definition_declares() -> None:
    base = script_args("base")
    cuda = {"ROOTFS", "SITE", "FILES", "DEBS", "BASE_DESC", "TORCH_VERSION", "CUDA_VERSION",
            "NCCL_VERSION"}
    assert cuda <= base and declared_args(DEF) == cuda


def test_debian_pins_cover_the_verbs_userspace_and_numactl() -> None:
    pinned = {}
    for line in DEBS.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "=" in line:
            name, version = line.split("=", 1)
            assert re.fullmatch(r"[a-z0-9.+-]+", name) and re.fullmatch(r"[\w.+~:-]+", version), line
            pinned[name] = version
    for name in ("libibverbs1", "ibverbs-providers", "librdmacm1", "numactl", "libnuma1"):
        assert name in pinned, f"requirements/cuda-debian.txt: {name} unpinned"
    assert len({pinned[n] for n in ("libibverbs1", "ibverbs-providers", "librdmacm1")}) == 1
    # the image checks them rather than trusting the mirror
    assert "dpkg-query -W -f='${Version}'" in sections(DEF)["post"]


def test_wheels_come_from_pypi_explicitly_and_are_laid_out_on_the_host() -> None:
    text = SCRIPT.read_text()
    body = re.search(r"^pypi_args\(\) \{\n(.*?)^\}", text, re.M | re.S).group(1)
    assert "--isolated --index-url" in body  # never the local CPU wheel in /opt/wheels
    stage = re.search(r"^stage_cuda_site\(\) \{\n(.*?)^\}", text, re.M | re.S).group(1)
    assert "--target" in stage and "--no-index" in stage and "platform_args" in stage


def test_cuda_check_names_a_label_torch_contradicts(tmp_path) -> None:
    """The real check against this venv's CPU torch: its CUDA version is None, not 13.0."""
    pytest.importorskip("torch")
    labels = tmp_path / "labels.json"
    machine = os.uname().machine
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)
    labels.write_text(json.dumps({
        "org.torchrun-jsc.arch": arch, "org.torchrun-jsc.torch-version": "2.13.0",
        "org.torchrun-jsc.cuda-version": "13.0", "org.torchrun-jsc.nccl-version": "2.29.7"}))
    r = subprocess.run([sys.executable, str(CHECK)], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "CUDA_CHECK_LABELS": str(labels)})
    assert r.returncode == 1
    assert "CUDA_MISMATCH: cuda-version: torch reports None, label says 13.0" in r.stdout


def test_cuda_check_refuses_an_image_of_another_architecture(tmp_path) -> None:
    labels = tmp_path / "labels.json"
    other = "arm64" if os.uname().machine == "x86_64" else "amd64"
    labels.write_text(json.dumps({"org.torchrun-jsc.arch": other}))
    r = subprocess.run([sys.executable, str(CHECK)], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "CUDA_CHECK_LABELS": str(labels)})
    assert r.returncode == 1
    assert f"CUDA_MISMATCH: machine is {os.uname().machine}, label arch says {other}" in r.stdout
