"""Ring 1: Horovod with NCCL on the CUDA base (`make horovod-image BASE=cuda`) and its GPU check,
without building: nvcc's pins (requirements/cuda-nvcc.txt) against the base's CUDA, the wiring
of scripts/build-image.sh and containers/horovod.def to the one build recipe
(containers/files/horovod-build.sh), and that recipe's and scripts/horovod-gpu-check.sh's
argument handling and toolkit lookup, run for real with --dry-run on planted directories
(a stand-in torch module; the real build: docs/development/containers.md#horovod).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.test_image_defs import declared_args, script_args, sections

REPO = Path(__file__).resolve().parents[2]
BUILD_SH = REPO / "containers" / "files" / "horovod-build.sh"
GPU_CHECK = REPO / "scripts" / "horovod-gpu-check.sh"
CHECK_PY = REPO / "containers" / "files" / "horovod_check.py"
SCRIPT = REPO / "scripts" / "build-image.sh"
DEF = (REPO / "containers" / "horovod.def").read_text()
NVCC_REQ = REPO / "requirements" / "cuda-nvcc.txt"


def pins(path: Path) -> dict[str, str]:
    lines = (ln.split("#", 1)[0].strip() for ln in path.read_text().splitlines())
    return dict(ln.split("==", 1) for ln in lines if ln)


def test_nvcc_pins_are_the_bases_cuda_release() -> None:
    """cuda-toolkit 13.0.3's `nvcc` extra (+ cccl); cudart exactly the base's (headers and static
    library must match the libcudart.so.13 that torch loads)."""
    nvcc, base = pins(NVCC_REQ), pins(REPO / "requirements" / "cuda.txt")
    assert set(nvcc) == {"nvidia-cuda-nvcc", "nvidia-cuda-crt", "nvidia-nvvm",
                         "nvidia-cuda-runtime", "nvidia-cuda-cccl"}
    release = ".".join(base["cuda-toolkit"].split(".")[:2])
    assert all(v.startswith(release + ".") for v in nvcc.values()), (release, nvcc)
    assert nvcc["nvidia-cuda-runtime"] == base["nvidia-cuda-runtime"]
    assert nvcc["nvidia-cuda-nvcc"] == nvcc["nvidia-cuda-crt"] == nvcc["nvidia-nvvm"]


def function(name: str) -> str:
    return re.search(rf"^{name}\(\) \{{\n(.*?)^\}}", SCRIPT.read_text(), re.M | re.S).group(1)


def test_build_script_builds_nccl_on_the_cuda_base_with_its_own_wheelhouse() -> None:
    body = function("cmd_horovod")
    cuda = body.split('if [ "$name" = cuda ]; then', 1)[1].split("\n    fi\n", 1)[0]
    assert "gpu=NCCL" in cuda and '[ "$ARCH" = "$HOST_ARCH" ]' in cuda
    assert 'fill_horovod_wheelhouse "$name"' in body
    assert '"WHEELHOUSE=$(horovod_wheelhouse "$name")"' in body
    fill = function("fill_horovod_wheelhouse")
    assert '-r "$CUDA_NVCC_REQ"' in fill and "platform_args" in fill and "pypi_args" in fill
    # the local base keeps its wheelhouse (and the stamp of what it holds)
    assert 'echo "$build/wheelhouse/horovod"' in function("horovod_wheelhouse")
    assert script_args("horovod") <= declared_args(DEF)


def test_makefile_rebuilds_on_the_recipe_and_on_nvccs_pins_for_cuda_only() -> None:
    def prereqs(*args: str) -> str:
        out = subprocess.run(["make", "-p", "-n", "-C", str(REPO), "image-names", *args],
                             capture_output=True, text=True, timeout=60, check=True).stdout
        return next(ln for ln in out.splitlines() if re.match(r"^horovod[-\w]*\.sif:", ln))
    cuda, local = prereqs("BASE=cuda", "ARCH=amd64"), prereqs("BASE=local", "ARCH=amd64")
    assert cuda.startswith("horovod-cuda.sif:") and "requirements/cuda-nvcc.txt" in cuda
    assert "requirements/cuda-nvcc.txt" not in local
    assert "containers/files/horovod-build.sh" in cuda and "containers/files/horovod-build.sh" in local


def test_definition_builds_with_the_shared_recipe_and_checks_nccl() -> None:
    s = sections(DEF)
    assert "{{ FILES }}/horovod-build.sh /opt/torchrun-jsc/horovod-build.sh" in s["files"]
    call = s["post"].split("bash /opt/torchrun-jsc/horovod-build.sh", 1)[1].split("\n    cd /", 1)[0]
    for arg in ('--gpu "{{ GPU_OPERATIONS }}"', '--deps "{{ PY_DEPS }}"', "--wheelhouse /opt/wheelhouse",
                "--mpi yes", "horovod-{{ HOROVOD_VERSION }}.tar.gz"):
        assert arg in call
    assert "CMAKE_CXX_STANDARD" not in s["post"]  # the patch lives in the recipe only
    # the label is measured from the built library and must equal what was asked for
    assert "h.nccl_built()" in s["post"] and "org.torchrun-jsc.horovod-gpu-operations $gpu_ops" in s["post"]
    test = s["test"]
    assert '"{{ GPU_OPERATIONS }}" = NCCL' in test and 'parts="$parts NCCL"' in test
    assert "libnccl.so" in test and "not found" in test


def test_dependency_lists_agree() -> None:
    image = re.search(r"^HOROVOD_DEPS=\((.*)\)$", SCRIPT.read_text(), re.M).group(1).split()
    recipe = re.search(r'^deps="(.*)"$', BUILD_SH.read_text(), re.M).group(1).split()
    gpu = re.search(r'^DEPS="(.*)"$', GPU_CHECK.read_text(), re.M).group(1).split()
    assert image == recipe and set(recipe) <= set(gpu)


def test_scripts_pass_shellcheck() -> None:
    assert shutil.which("shellcheck"), "shellcheck missing: run `make setup`"
    r = subprocess.run(["shellcheck", str(BUILD_SH), str(GPU_CHECK)], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stdout


# --- the recipe and the GPU check, run with planted inputs ------------------------------------

@pytest.fixture()
def plant(tmp_path: Path) -> dict[str, Path]:
    """A stand-in torch (CUDA 13.0, no GPU) with an NCCL wheel beside it, an sdist name, a CUDA
    toolkit tree (lib only, as one assembled from wheels) and a wrapper `nvcc` on PATH."""
    site = tmp_path / "site"
    (site / "torch").mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text(
        "import types\n__version__ = '2.13.0+cu130'\nversion = types.SimpleNamespace(cuda='13.0')\n"
        "cuda = types.SimpleNamespace(is_available=lambda: False)\n")
    nccl = site / "nvidia" / "nccl"
    (nccl / "include").mkdir(parents=True)
    (nccl / "lib").mkdir()
    (nccl / "include" / "nccl.h").write_text(
        "#define NCCL_MAJOR 2\n#define NCCL_MINOR 29\n#define NCCL_PATCH 7\n")
    (nccl / "lib" / "libnccl.so.2").write_bytes(b"")
    cuda = tmp_path / "cuda-13.0"
    for d in ("bin", "include", "lib"):
        (cuda / d).mkdir(parents=True)
    (cuda / "bin" / "nvcc").write_text("#!/bin/sh\n")
    (cuda / "bin" / "nvcc").chmod(0o755)
    (cuda / "include" / "cuda_runtime.h").write_text("")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "nvcc").write_text(f"#!/bin/sh\nexec {cuda}/bin/nvcc \"$@\"\n")  # a wrapper
    (bindir / "nvcc").chmod(0o755)
    gear = tmp_path / "gear"
    gear.mkdir()
    (gear / "horovod-0.28.1.tar.gz").write_bytes(b"")
    return {"site": site, "cuda": cuda, "bin": bindir, "gear": gear, "nccl": nccl, "tmp": tmp_path}


def run(cmd: list, plant: dict, **env: str) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "CUDA_PATH", "OUT")}
    full.update({"PYTHONPATH": str(plant["site"]), "TMPDIR": str(plant["tmp"]),
                 "PATH": f"{plant['bin']}:{os.environ['PATH']}"}, **env)
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=60,
                          env=full, cwd=REPO)


def one_line(r: subprocess.CompletedProcess, code: int, text: str) -> None:
    assert r.returncode == code, (r.stdout, r.stderr)
    assert r.stderr.count("\n") == 1 and text in r.stderr, r.stderr


@pytest.mark.parametrize("args,text", [
    ([], "no SDIST given"),
    (["missing.tar.gz"], "SDIST missing.tar.gz is not a file"),
    (["--gpu", "ROCM", "GEAR"], "--gpu ROCM: expected NCCL or none"),
    (["--mpi", "maybe", "GEAR"], "--mpi maybe: expected yes, no or auto"),
    (["--jobs", "0", "GEAR"], "--jobs 0: expected a positive number"),
    (["--jobs", "--dry-run"], "--jobs needs a value"),
    (["--bogus", "GEAR"], "unknown option --bogus"),
    (["GEAR", "GEAR"], "one SDIST only"),
    (["--python", "no-such-python3", "GEAR"], "--python no-such-python3 not found"),
    (["--wheelhouse", "/nonexistent", "GEAR"], "--wheelhouse /nonexistent is not a directory"),
    (["--mpi", "no", "--gpu", "NCCL", "--cuda-home", "/nonexistent", "GEAR"], "no nvcc in /nonexistent/bin"),
    (["--mpi", "no", "--gpu", "NCCL", "--nccl-home", "/nonexistent", "GEAR"],
     "/nonexistent/include/nccl.h missing"),
])
def test_recipe_refuses_bad_input_in_one_line(plant, args, text) -> None:
    sdist = plant["gear"] / "horovod-0.28.1.tar.gz"
    r = run(["bash", BUILD_SH, *[sdist if a == "GEAR" else a for a in args], "--dry-run"], plant)
    one_line(r, 2, text)


def test_recipe_refuses_an_sdist_of_another_name_and_a_cpu_torch(plant) -> None:
    other = plant["tmp"] / "torch-1.0.tar.gz"
    other.write_bytes(b"")
    one_line(run(["bash", BUILD_SH, "--dry-run", other], plant), 2, "is not named horovod-VERSION.tar.gz")
    init = plant["site"] / "torch" / "__init__.py"
    init.write_text(init.read_text().replace("cuda='13.0'", "cuda=None"))
    r = run(["bash", BUILD_SH, "--dry-run", "--mpi", "no", "--gpu", "NCCL",
             plant["gear"] / "horovod-0.28.1.tar.gz"], plant)
    one_line(r, 2, "is a CPU build (torch.version.cuda is None)")


def test_recipe_finds_a_toolkit_and_nccl_beside_torch(plant) -> None:
    sdist = plant["gear"] / "horovod-0.28.1.tar.gz"
    # `nvcc` on PATH is a wrapper script: its directory's parent holds no toolkit and is skipped
    # (then /usr/local/cuda, if this machine has a toolkit there, else one line)
    r = run(["bash", BUILD_SH, "--dry-run", "--mpi", "no", "--gpu", "NCCL", sdist], plant)
    assert f"CUDA_HOME {plant['tmp']} " not in r.stdout
    if r.returncode:
        one_line(r, 2, "no CUDA toolkit (bin/nvcc and include/cuda_runtime.h) in $CUDA_HOME")
    else:
        assert "CUDA_HOME /usr/local/cuda (installed)" in r.stdout
    r = run(["bash", BUILD_SH, "--dry-run", "--mpi", "no", "--gpu", "NCCL", sdist], plant,
            CUDA_HOME=str(plant["cuda"]))
    assert r.returncode == 0, r.stderr
    assert f"CUDA_HOME {plant['cuda']} (installed), NCCL 2.29.7 from {plant['nccl']}" in r.stdout
    assert "GPU operations NCCL, MPI no, Gloo yes" in r.stdout
    # a CUDA_HOME without headers is skipped, not taken
    bad = plant["tmp"] / "bad-cuda"
    (bad / "bin").mkdir(parents=True)
    shutil.copy(plant["cuda"] / "bin" / "nvcc", bad / "bin" / "nvcc")
    r = run(["bash", BUILD_SH, "--dry-run", "--mpi", "no", "--gpu", "NCCL", sdist], plant,
            CUDA_HOME=str(bad), CUDA_PATH=str(plant["cuda"]))
    assert f"CUDA_HOME {plant['cuda']} (installed)" in r.stdout, r.stdout + r.stderr


def test_recipe_prefers_the_wheelhouses_nvcc(plant) -> None:
    wh = plant["tmp"] / "wheelhouse"
    wh.mkdir()
    (wh / "nvidia_cuda_nvcc-13.0.88-py3-none-manylinux2014_x86_64.whl").write_bytes(b"")
    r = run(["bash", BUILD_SH, "--dry-run", "--mpi", "no", "--gpu", "NCCL", "--wheelhouse", wh,
             "--workdir", plant["tmp"] / "w", plant["gear"] / "horovod-0.28.1.tar.gz"], plant,
            CUDA_HOME=str(plant["cuda"]))
    assert r.returncode == 0, r.stderr
    assert f"CUDA_HOME {plant['tmp'] / 'w'}/cuda/nvidia/cu13 (wheels)" in r.stdout


def test_recipe_help_lists_every_option() -> None:
    r = subprocess.run(["bash", str(BUILD_SH), "--help"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0
    parser = BUILD_SH.read_text().split('while [ "$#" -gt 0 ]; do', 1)[1].split("\ndone\n", 1)[0]
    options = set(re.findall(r"^\s+(--[a-z-]+(?:\|--[a-z-]+)*)\)", parser, re.M))
    options = {o for group in options for o in group.split("|")} - {"--help"}
    assert len(options) >= 12, options
    for option in options:
        assert f"#     {option} " in BUILD_SH.read_text() and option in r.stdout, option


@pytest.mark.parametrize("args,code,text", [
    ([], 2, "no DIR given"),
    (["/nonexistent"], 2, "DIR /nonexistent is not a directory"),
    (["EMPTY"], 2, "horovod-0.28.1.tar.gz missing"),
    (["--jobs", "x", "GEAR"], 2, "--jobs x: expected a positive number"),
    (["--fetch"], 2, "usage: horovod-gpu-check.sh --fetch DIR"),
    (["--bogus", "GEAR"], 2, "unknown option --bogus"),
])
def test_gpu_check_refuses_bad_input_in_one_line(plant, args, code, text) -> None:
    empty = plant["tmp"] / "empty"
    empty.mkdir()
    subst = {"GEAR": plant["gear"], "EMPTY": empty}
    one_line(run(["bash", GPU_CHECK, *[subst.get(a, a) for a in args]], plant), code, text)


def test_gpu_check_fails_in_one_line_without_a_gpu(plant) -> None:
    """Its last line is the verdict (stdout), before any build starts."""
    r = run(["bash", GPU_CHECK, plant["gear"]], plant)
    assert r.returncode == 1 and r.stdout.count("\n") == 1, (r.stdout, r.stderr)
    assert r.stdout.startswith("HOROVOD_GPU_CHECK FAIL torch 2.13.0+cu130 sees no GPU")
    r = run(["bash", GPU_CHECK, plant["gear"]], plant, PYTHONPATH=str(plant["tmp"]))
    assert r.returncode == 1 and r.stdout.startswith("HOROVOD_GPU_CHECK FAIL cannot import torch")


def test_gpu_check_dry_run_shows_the_recipes_settings(plant) -> None:
    r = run(["bash", GPU_CHECK, "--dry-run", "--jobs", "16", plant["gear"]], plant,
            CUDA_HOME=str(plant["cuda"]))
    assert r.returncode == 0, r.stderr
    assert "no GPU visible" in r.stdout and "16 jobs" in r.stdout
    assert f"CUDA_HOME {plant['cuda']} (installed), NCCL 2.29.7" in r.stdout
    assert not list(plant["tmp"].glob("horovod-gpu-check.*")), "--dry-run left its work directory"


def test_gpu_check_runs_the_images_check_on_the_gpu() -> None:
    text = GPU_CHECK.read_text()
    assert 'build_sh=$repo/containers/files/horovod-build.sh' in text
    assert '"$check_py" --cuda' in text and "NCCL_DEBUG=INFO" in text
    assert "--gpu NCCL" in text and "-np 1" in text


def test_allreduce_check_refuses_unknown_arguments_before_importing_horovod() -> None:
    r = subprocess.run([sys.executable, "-I", str(CHECK_PY), "--gpu"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2
    assert r.stderr == "HOROVOD_FAIL usage: horovod_check.py [--cuda], not --gpu\n"


def test_recipe_uses_ninja_where_make_is_missing(plant) -> None:
    """A GPU machine may have cmake and ninja but no make (CMake's default generator)."""
    tools = plant["tmp"] / "tools"
    tools.mkdir()
    for name in ("bash", "cmake", "c++", "dirname", "basename", "nproc", "mktemp", "sed", "paste", "head",
                 "readlink", "rm", "mkdir", "cat", "tail", "date", "env"):
        found = shutil.which(name)
        assert found, f"{name} missing on this machine"
        (tools / name).symlink_to(found)
    (tools / "python3").symlink_to(sys.executable)
    sdist = plant["gear"] / "horovod-0.28.1.tar.gz"
    cmd = ["bash", BUILD_SH, "--dry-run", "--mpi", "no", sdist]
    r = run(cmd, plant, PATH=str(tools))
    one_line(r, 2, "neither make nor ninja on PATH")
    (tools / "ninja").write_text("#!/bin/sh\n")
    (tools / "ninja").chmod(0o755)
    r = run(cmd, plant, PATH=str(tools))
    assert r.returncode == 0 and "GPU operations none, MPI no, Gloo yes, " in r.stdout, r.stderr
    assert ", Ninja, work in " in r.stdout
