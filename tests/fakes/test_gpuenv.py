"""Ring 2: what Enroot and pyxis containers see, run by bash with the recording fakes.

- pyxis imports the container's environment over the task's except the names given with
  ``--container-env`` (tests/helpers/fake.py: FAKE_PYXIS_ENV plays Enroot's 50-slurm-pytorch.sh
  hook, which writes the plain first hostname as MASTER_ADDR and another MASTER_PORT): the
  kit's rendezvous, socket interface, GPU and cache names keep the kit's values.
- GPUs requested: NVIDIA_DRIVER_CAPABILITIES is compute,utility unless already chosen.
- Caches: XDG_CACHE_HOME, TRITON_CACHE_DIR, HF_HOME, TORCH_HOME, PIP_CACHE_DIR point into a
  per-user directory the node makes (mode 700, never a link or another user's) and Enroot
  mounts; a value the user set is kept.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
from pathlib import Path
from typing import Iterator

import pytest
import yaml

from tests.helpers import fake
from tests.helpers.cluster import Cluster

# What Enroot's 50-slurm-pytorch.sh adds for job 4242 on jwb[0001-0002] (plain hostname,
# 61000 + 4242 % 4536), plus the image's own ENV (an unset driver capability, an image name).
HOOK_ENV = {"MASTER_ADDR": "jwb0001", "MASTER_PORT": "65242", "WORLD_SIZE": "2",
            "NVIDIA_DRIVER_CAPABILITIES": "utility", "NVIDIA_VISIBLE_DEVICES": "all",
            "HF_HOME": "/root/.cache/huggingface", "IMAGE_ONLY": "from the image",
            "PLAIN": "the image's"}


@pytest.fixture
def fakes(tmp_path: Path) -> Iterator[Cluster]:
    cluster = Cluster(tmp_path, "submit_dir")
    cluster.env["TORCHRUN_JSC_CACHE"] = str(tmp_path / "cache")
    for name in ("NVIDIA_DRIVER_CAPABILITIES", "XDG_CACHE_HOME", "TRITON_CACHE_DIR", "HF_HOME",
                 "TORCH_HOME", "PIP_CACHE_DIR", "PYXIS_CONTAINER_ENV"):
        cluster.env.pop(name, None)
    yield cluster
    for path in fake.enroot_paths(cluster.env):
        shutil.rmtree(path, ignore_errors=True)


def spec(runtime: dict, mode: str = "srun", gpus: int = 2, **extra: object) -> str:
    data = {"job": {"nodes": 2, "gpus_per_node": gpus, "time": "10"}, "site": "jsc",
            "runtime": runtime, "launch": {"mode": mode, "procs_per_node": 2},
            "env": {"set": {"PLAIN": "a b"}}, "program": ["python3", "train.py"]}
    data.update(extra)
    return yaml.safe_dump(data)


PYXIS = {"kind": "pyxis", "image": "image.sqsh"}
ENROOT = {"kind": "enroot", "image": "image.sqsh"}


def program_envs(fakes: Cluster) -> list:
    """The program's environment in each task (the interface step is python3-net)."""
    return [r["env"] for r in fakes.records("python3")]


def test_pyxis_srun_names_the_kits_variables(fakes):
    script = fakes.render(spec(PYXIS, job={"nodes": 2, "gpus_per_node": 2, "time": "10",
                                           "requeue": {"max": 1}}))
    text = script.read_text()
    (flag,) = re.findall(r'"--container-env=([^"]*)"', text)
    names = flag.replace("${pyxis_env_more}", "").split(",")
    for name in ("MASTER_ADDR", "MASTER_PORT", "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME",
                 "NVIDIA_DRIVER_CAPABILITIES", "NVIDIA_VISIBLE_DEVICES", "PLAIN",
                 "REQUEUE_MARKER", "REQUEUE_SIGNAL", "XDG_CACHE_HOME", "TRITON_CACHE_DIR",
                 "HF_HOME", "TORCH_HOME", "PIP_CACHE_DIR"):
        assert name in names
    (fakes.dir / "image.sqsh").write_text("squashfs")
    done = fakes.run(script, PYXIS_CONTAINER_ENV="SITE_A,SITE_B")
    assert done.returncode == 0, done.stderr
    launch = fakes.records("srun")[-1]["argv"]
    (given,) = [a for a in launch if a.startswith("--container-env=")]
    # A command-line --container-env replaces PYXIS_CONTAINER_ENV: the site's names are kept.
    assert given == "--container-env=" + ",".join(names) + ",SITE_A,SITE_B"


@pytest.mark.parametrize("mode", ["srun", "horovod"])
def test_pyxis_container_env_does_not_override_the_kits_values(fakes, mode):
    (fakes.dir / "image.sqsh").write_text("squashfs")
    runtime = dict(PYXIS)
    script = fakes.render(spec(runtime, mode=mode))
    done = fakes.run(script, FAKE_PYXIS_ENV=json.dumps(HOOK_ENV), SLURM_JOB_GPUS="0,1")
    assert done.returncode == 0, done.stderr
    envs = program_envs(fakes)
    assert len(envs) == 4
    for env in envs:
        assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("jwb0001i", "29742")
        assert env["NVIDIA_DRIVER_CAPABILITIES"] == "compute,utility"
        assert env["NVIDIA_VISIBLE_DEVICES"] == "0,1"
        assert env["PLAIN"] == "a b" and env["GLOO_SOCKET_IFNAME"] == "ib0"
        assert env["HF_HOME"] == f"{fakes.env['TORCHRUN_JSC_CACHE']}/huggingface"
        assert env["IMAGE_ONLY"] == "from the image"  # the import did happen
    # Control: without --container-env the hook's plain hostname wins (the fake is not inert).
    bare = script.with_name("bare.job")
    bare.write_text(re.sub(r' *"--container-env=[^"]*"', "", script.read_text()))
    for path in fakes.log.glob("*.json"):
        path.unlink()
    # (The interface is given: the hook's plain hostname does not resolve on the fake network.)
    done = fakes.run(bare, FAKE_PYXIS_ENV=json.dumps(HOOK_ENV), GLOO_SOCKET_IFNAME="ib0")
    assert done.returncode == 0, done.stderr
    assert {e["MASTER_ADDR"] for e in program_envs(fakes)} == {"jwb0001"}


@pytest.mark.parametrize("runtime", [ENROOT, PYXIS], ids=["enroot", "pyxis"])
@pytest.mark.parametrize("given, gpus, expected", [
    (None, 2, "compute,utility"),  # the hook's default would be `utility`: no libcuda
    ("all", 2, "all"),  # the site's or user's choice stays
    (None, 0, None),  # no GPUs: nothing to ask for
])
def test_driver_capabilities(fakes, runtime, given, gpus, expected):
    (fakes.dir / "image.sqsh").write_text("squashfs")
    extra = {} if given is None else {"NVIDIA_DRIVER_CAPABILITIES": given}
    done = fakes.run(fakes.render(spec(runtime, gpus=gpus)), **extra)
    assert done.returncode == 0, done.stderr
    envs = program_envs(fakes)
    assert envs and {e.get("NVIDIA_DRIVER_CAPABILITIES") for e in envs} == {expected}
    if runtime is ENROOT:  # what Enroot's nvidia hook reads: `enroot start`'s environment
        starts = [r for r in fakes.records("enroot") if r["argv"][:1] == ["start"]]
        assert {r["env"].get("NVIDIA_DRIVER_CAPABILITIES") for r in starts} == {expected}


def test_enroot_caches_are_writable_and_mounted(fakes):
    (fakes.dir / "image.sqsh").write_text("squashfs")
    cache = fakes.env["TORCHRUN_JSC_CACHE"]
    done = fakes.run(fakes.render(spec(ENROOT)), TORCH_HOME="/p/scratch/me/torch")
    assert done.returncode == 0, done.stderr
    mode = os.stat(cache).st_mode
    assert stat.S_ISDIR(mode) and stat.S_IMODE(mode) == 0o700
    starts = [r for r in fakes.records("enroot") if r["argv"][:1] == ["start"]]
    assert starts and all(f"{cache}:{cache}" in r["argv"] for r in starts)
    for env in program_envs(fakes):
        assert env["TORCHRUN_JSC_CACHE"] == env["XDG_CACHE_HOME"] == cache
        assert env["TRITON_CACHE_DIR"] == f"{cache}/triton"
        assert env["HF_HOME"] == f"{cache}/huggingface"
        assert env["PIP_CACHE_DIR"] == f"{cache}/pip"
        assert env["TORCH_HOME"] == "/p/scratch/me/torch"  # the user's stays


def test_enroot_cache_directory_that_is_a_link_is_refused(fakes, tmp_path):
    (fakes.dir / "image.sqsh").write_text("squashfs")
    (tmp_path / "elsewhere").mkdir()
    link = tmp_path / "cache"
    link.symlink_to(tmp_path / "elsewhere")
    done = fakes.run(fakes.render(spec(ENROOT)))
    assert done.returncode != 0
    assert f"TORCHRUN_JSC_CACHE={link} on" in done.stderr and "a link or not this user" in \
        done.stderr
    assert not program_envs(fakes)


def test_pyxis_setup_makes_the_cache_directory(fakes):
    (fakes.dir / "image.sqsh").write_text("squashfs")
    done = fakes.run(fakes.render(spec(PYXIS, mode="torchrun")))
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE(os.stat(fakes.env["TORCHRUN_JSC_CACHE"]).st_mode) == 0o700
