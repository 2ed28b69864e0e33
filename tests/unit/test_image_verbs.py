"""InfiniBand userspace in every image (containers/files/verbs_check.py).

NCCL reaches InfiniBand/RoCE through rdma-core's libibverbs.so.1 and a provider per device
kind; an image without them makes NCCL run over TCP sockets with no error. Ring 1: the check's
own verdicts (library missing, provider missing, devices listed). Ring 2: the Horovod NCCL build
on a -runtime docker base is refused in one line before anything is built. Ring 3: every image
the kit builds loads the library and the mlx5 provider (the lab has no HCA: 0 devices).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CHECK = REPO / "containers/files/verbs_check.py"


def load_check():
    spec = importlib.util.spec_from_file_location("verbs_check", CHECK)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.ring1
def test_missing_library_says_nccl_falls_back(monkeypatch, capsys):
    vc = load_check()

    def no_lib(name):
        raise OSError(f"{name}: cannot open shared object file")
    monkeypatch.setattr(vc.ctypes, "CDLL", no_lib)
    assert vc.main() == 1
    out = capsys.readouterr().out.strip()
    assert out.startswith("VERBS_MISSING: libibverbs.so.1 does not load") and "TCP sockets" in out
    assert len(out.splitlines()) == 1


@pytest.mark.ring1
def test_missing_mlx5_provider_is_refused(monkeypatch, capsys):
    vc = load_check()
    monkeypatch.setattr(vc.ctypes, "CDLL", lambda name: object())
    monkeypatch.setattr(vc, "providers", lambda: ["rxe", "siw"])
    assert vc.main() == 1
    assert "no mlx5 provider among ['rxe', 'siw']" in capsys.readouterr().out


@pytest.mark.ring1
def test_devices_are_listed(monkeypatch, capsys):
    vc = load_check()
    monkeypatch.setattr(vc.ctypes, "CDLL", lambda name: object())
    monkeypatch.setattr(vc, "providers", lambda: ["mlx5", "rxe"])
    monkeypatch.setattr(vc, "devices", lambda lib: ["mlx5_0", "mlx5_1"])
    assert vc.main() == 0
    assert capsys.readouterr().out.strip() == (
        "VERBS_OK lib=libibverbs.so.1 providers=2 (mlx5 rxe) devices=2 mlx5_0 mlx5_1")


@pytest.mark.ring2
def test_horovod_nccl_on_runtime_base_is_refused_in_one_line():
    env = dict(os.environ, DOCKER_FROM="pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime")
    p = subprocess.run(["bash", "scripts/build-image.sh", "horovod", "docker", "/nonexistent/h.sif"],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert "needs a -devel base" in lines[0]
    assert "DOCKER_FROM=pytorch/pytorch:2.7.1-cuda12.8-cudnn9-devel" in lines[0]
    assert not Path("/nonexistent/h.sif").exists()


IMAGES = {"image.sif": "image", "horovod.sif": "horovod-image", "launchers.sif": "launchers-image"}


@pytest.mark.ring3
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
