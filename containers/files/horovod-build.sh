#!/usr/bin/env bash
# Build and install Horovod from its PyPI sdist against the torch of one Python, offline.
# One recipe for both places that build it: containers/horovod.def's %post (the images) and
# scripts/horovod-gpu-check.sh (a machine with a GPU, outside any image).
#
#   horovod-build.sh [options] SDIST
#     --python PY       the interpreter whose torch Horovod is built against (default: python3)
#     --wheelhouse DIR  wheels of Horovod's Python dependencies (installed first, --no-index);
#                       with nvidia_cuda_nvcc-*.whl in it, also the CUDA compiler (below)
#     --deps "LIST"     the dependencies installed from --wheelhouse (default: cloudpickle
#                       psutil packaging pyyaml cffi wheel: Horovod's, and its setup.py's)
#     --target DIR      install there (pip --target) instead of into PY's site-packages
#     --gpu NCCL|none   Horovod's GPU operations (default: none, a CPU build)
#     --cuda-home DIR   the CUDA toolkit for --gpu NCCL (default: the nvcc wheels of the
#                       wheelhouse if any, else $CUDA_HOME, else `nvcc` on PATH, else /usr/local/cuda)
#     --nccl-home DIR   NCCL's include/ and lib/ (default: the nvidia-nccl wheel beside PY's torch)
#     --mpi yes|no|auto the MPI controller (default: auto = yes when mpicxx is on PATH)
#     --jobs N          parallel compile jobs (default: nproc)
#     --log FILE        the build's full output (default: WORKDIR/build.log)
#     --workdir DIR     where the sdist is unpacked (default: a new temporary directory,
#                       removed afterwards unless the build failed)
#     --dry-run         print what would be built and with which settings, build nothing
#
# The patches, and why (Horovod 0.28.1 is the last release; it is no longer developed):
# 1. horovod#3996: torch >= 2.1's headers need C++17; Horovod sets C++14 and strips any -std=
#    from CXXFLAGS, so only its CMake files can change it. The top level (which also builds
#    gloo) and the torch extension must agree: raising only the torch one fails at link time
#    (gloo's Store::kDefaultTimeout defined twice).
# 2. No source patch for CUDA from PyPI: the nvcc wheels (nvidia-cuda-nvcc, -crt, nvvm,
#    nvidia-cuda-runtime's headers and static cudart, cccl) form a toolkit tree under
#    nvidia/cu13 (bin/nvcc, include/, lib/, nvvm/) that CMake and torch.utils.cpp_extension
#    accept as CUDA_HOME once lib64 -> lib exists (nvcc.profile links from lib64). The wheels ship only versioned shared libraries (libnccl.so.2,
#    libcudart.so.13), and CMake's find_library wants the unversioned names: a link directory
#    in WORKDIR holds libnccl.so and libcudart.so symlinks to the libraries torch itself loads
#    at run time, and -Wl,-rpath records their real directories.
set -euo pipefail

die() { echo "horovod-build: $*" >&2; exit 2; }
note() { echo "horovod-build: $*"; }

deps="cloudpickle psutil packaging pyyaml cffi wheel"
python=python3 wheelhouse="" target="" gpu=none cuda_home="" nccl_home="" mpi=auto
jobs="" log="" workdir="" dry_run=0 sdist=""
while [ "$#" -gt 0 ]; do
    case $1 in
        --python|--wheelhouse|--deps|--target|--gpu|--cuda-home|--nccl-home|--mpi|--jobs|--log|--workdir)
            if [ "$#" -lt 2 ] || [ -z "$2" ] || [[ $2 == --* ]]; then die "$1 needs a value"; fi
            case $1 in
                --python) python=$2 ;; --wheelhouse) wheelhouse=$2 ;; --deps) deps=$2 ;;
                --target) target=$2 ;;
                --gpu) gpu=$2 ;; --cuda-home) cuda_home=$2 ;; --nccl-home) nccl_home=$2 ;;
                --mpi) mpi=$2 ;; --jobs) jobs=$2 ;; --log) log=$2 ;; --workdir) workdir=$2 ;;
            esac
            shift 2 ;;
        --dry-run) dry_run=1; shift ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
        -*) die "unknown option $1 (--help lists them)" ;;
        *) [ -z "$sdist" ] || die "one SDIST only, got '$sdist' and '$1'"; sdist=$1; shift ;;
    esac
done

[ -n "$sdist" ] || die "no SDIST given: horovod-build.sh [options] horovod-VERSION.tar.gz (--help)"
[ -f "$sdist" ] || die "SDIST $sdist is not a file"
case $(basename "$sdist") in
    horovod-*.tar.gz) version=$(basename "$sdist" .tar.gz); version=${version#horovod-} ;;
    *) die "SDIST $sdist is not named horovod-VERSION.tar.gz (pip download horovod==0.28.1 --no-deps --no-binary :all:)" ;;
esac
case $gpu in
    NCCL|none) ;;
    *) die "--gpu $gpu: expected NCCL or none" ;;
esac
case $mpi in
    yes|no) ;;
    auto) if command -v mpicxx >/dev/null; then mpi=yes; else mpi=no; fi ;;
    *) die "--mpi $mpi: expected yes, no or auto" ;;
esac
[ -z "$jobs" ] && jobs=$(nproc)
[[ $jobs =~ ^[1-9][0-9]*$ ]] || die "--jobs $jobs: expected a positive number"
[ -z "$wheelhouse" ] || [ -d "$wheelhouse" ] || die "--wheelhouse $wheelhouse is not a directory"
command -v "$python" >/dev/null || die "--python $python not found"
command -v cmake >/dev/null || die "cmake not found on PATH (Debian: apt-get install cmake g++ make)"
command -v c++ >/dev/null || die "no C++ compiler (c++) on PATH (Debian: apt-get install g++)"
# setup.py drives CMake's default generator (make); with only ninja, CMake is told to use it.
if ! command -v make >/dev/null; then
    command -v ninja >/dev/null || die "neither make nor ninja on PATH (Debian: apt-get install make)"
    export CMAKE_GENERATOR=Ninja
fi
[ "$mpi" = no ] || command -v mpicxx >/dev/null || die "--mpi yes but no mpicxx on PATH (Debian: libopenmpi-dev)"

# torch, from PY.
torch_info=$("$python" -c 'import torch; print(torch.__version__, torch.version.cuda)' 2>/dev/null) ||
    die "$python cannot import torch: Horovod's PyTorch extension builds against an installed torch"
read -r torch_version torch_cuda <<<"$torch_info"
"$python" -m pip --version >/dev/null 2>&1 || die "$python has no pip ($python -m pip --version failed)"

# The directory of a package beside torch (the nvidia.* wheels: nvidia.nccl), or nothing.
py_pkg_dir() {
    "$python" - "$1" <<'PY' 2>/dev/null || true
import importlib, sys
try:
    mod = importlib.import_module(sys.argv[1])
except ImportError:
    sys.exit(0)
for path in getattr(mod, "__path__", []):
    print(path)
    break
PY
}

tmp_created=0
if [ -z "$workdir" ]; then
    workdir=$(mktemp -d "${TMPDIR:-/tmp}/horovod-build.XXXXXX")
    tmp_created=1
fi
mkdir -p "$workdir"
workdir=$(cd "$workdir" && pwd)
[ -n "$log" ] || log=$workdir/build.log

cuda_from=""
if [ "$gpu" = NCCL ]; then
    [ "$torch_cuda" != None ] || die "--gpu NCCL but $python's torch $torch_version is a CPU build (torch.version.cuda is None)"
    # The CUDA toolkit: the wheelhouse's nvcc wheels (laid out into WORKDIR), or an installed one.
    if [ -z "$cuda_home" ] && [ -n "$wheelhouse" ] && compgen -G "$wheelhouse/nvidia_cuda_nvcc-*.whl" >/dev/null; then
        cuda_from=wheels  # CUDA 13's wheels install under nvidia/cu13
        cuda_home=$workdir/cuda/nvidia/cu13
    elif [ -z "$cuda_home" ]; then
        # As torch.utils.cpp_extension looks, skipping candidates without nvcc and headers
        # (an `nvcc` on PATH may be a wrapper script elsewhere).
        candidates=("${CUDA_HOME:-}" "${CUDA_PATH:-}")
        if command -v nvcc >/dev/null; then
            candidates+=("$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")")
        fi
        candidates+=(/usr/local/cuda)
        for c in "${candidates[@]}"; do
            if [ -n "$c" ] && [ -x "$c/bin/nvcc" ] && [ -f "$c/include/cuda_runtime.h" ]; then
                cuda_home=$c; break
            fi
        done
        [ -n "$cuda_home" ] || die "no CUDA toolkit (bin/nvcc and include/cuda_runtime.h) in \$CUDA_HOME, \$CUDA_PATH, beside nvcc on PATH or in /usr/local/cuda: pass --cuda-home DIR, or put nvidia_cuda_nvcc wheels in --wheelhouse"
    fi
    if [ "$cuda_from" != wheels ]; then
        cuda_from=installed
        [ -x "$cuda_home/bin/nvcc" ] || die "no nvcc in $cuda_home/bin: pass --cuda-home DIR (a CUDA toolkit), set CUDA_HOME, or put nvidia_cuda_nvcc wheels in --wheelhouse"
        [ -f "$cuda_home/include/cuda_runtime.h" ] || die "$cuda_home/include/cuda_runtime.h missing: --cuda-home must be a CUDA toolkit with its headers"
        # nvcc.profile links from lib64; a toolkit assembled from wheels may have lib only.
        # CMake passes CUDAFLAGS to nvcc from its first test compile on (the toolkit stays as is).
        if [ ! -e "$cuda_home/lib64" ] && [ -d "$cuda_home/lib" ]; then
            export CUDAFLAGS="${CUDAFLAGS:+$CUDAFLAGS }-L$cuda_home/lib"
        fi
    fi
    # NCCL: its headers and library from the wheel torch loads (nvidia-nccl-cu13 ships both).
    if [ -z "$nccl_home" ]; then
        nccl_home=$(py_pkg_dir nvidia.nccl)
        [ -n "$nccl_home" ] || die "no nvidia-nccl wheel beside $python's torch: pass --nccl-home DIR (with include/nccl.h and lib/libnccl.so*)"
    fi
    [ -f "$nccl_home/include/nccl.h" ] || die "$nccl_home/include/nccl.h missing: this NCCL has no headers, pass --nccl-home DIR with include/nccl.h"
    nccl_so=$(compgen -G "$nccl_home/lib/libnccl.so*" | head -n 1) ||
        die "no $nccl_home/lib/libnccl.so*: pass --nccl-home DIR with lib/libnccl.so.2"
    nccl_version=$(sed -n 's/^#define NCCL_\(MAJOR\|MINOR\|PATCH\) *\([0-9]*\).*/\2/p' "$nccl_home/include/nccl.h" | paste -sd. -)
fi

cat <<INFO
horovod-build: horovod $version, torch $torch_version (CUDA $torch_cuda) from $python
horovod-build: GPU operations $gpu, MPI $mpi, Gloo yes, $jobs jobs, ${CMAKE_GENERATOR:-make}, work in $workdir
INFO
if [ "$gpu" = NCCL ]; then
    note "CUDA_HOME $cuda_home ($cuda_from), NCCL $nccl_version from $nccl_home"
fi
if [ "$dry_run" = 1 ]; then
    note "dry run: nothing built"
    [ "$tmp_created" = 1 ] && rm -rf "$workdir"
    exit 0
fi

pip_install() {
    "$python" -m pip install --no-cache-dir --disable-pip-version-check --no-index "$@"
}
target_args=()
if [ -n "$target" ]; then
    mkdir -p "$target"
    target=$(cd "$target" && pwd)
    target_args=(--target "$target" --upgrade)  # --upgrade: replace bin/ of an earlier run
    # setup.py's setup_requires looks for the dependencies installed below: let it see them.
    export PYTHONPATH=$target${PYTHONPATH:+:$PYTHONPATH}
fi
if [ -n "$wheelhouse" ]; then
    # Horovod's own dependencies (and setup.py's: cffi, and wheel for pip's build).
    # shellcheck disable=SC2086  # a list of names
    pip_install --find-links "$wheelhouse" "${target_args[@]}" $deps >>"$log" 2>&1 ||
        { tail -n 20 "$log" >&2; die "installing Horovod's dependencies from $wheelhouse failed (log: $log)"; }
fi

src=$workdir/horovod-$version
rm -rf "$src"
tar -xzf "$sdist" -C "$workdir"
[ -f "$src/setup.py" ] || die "$sdist did not unpack to horovod-$version/setup.py"
# Patch 1 (above): C++14 -> C++17 in both CMake files; fail if the line moved.
for f in CMakeLists.txt horovod/torch/CMakeLists.txt; do
    grep -q 'set(CMAKE_CXX_STANDARD 14)' "$src/$f" || die "$f of horovod $version has no 'set(CMAKE_CXX_STANDARD 14)' to raise: the C++17 patch does not apply"
    sed -i 's/set(CMAKE_CXX_STANDARD 14)/set(CMAKE_CXX_STANDARD 17)/' "$src/$f"
done

# Found on the GPU machine (CMake 4, GCC 13; 2026-11-27): CMake >= 4 refuses the vendored
# gloo's cmake_minimum_required(VERSION < 3.5) unless told the oldest policy (CMake 3 ignores
# the variable); GCC >= 13 no longer includes <string>, <cstdint>, <stdexcept> through other
# headers, which horovod 0.28.1 relies on (group_table.h: std::string, common.h:
# std::logic_error). CMake takes CXXFLAGS as its first CMAKE_CXX_FLAGS (only -std= is stripped).
export CMAKE_POLICY_VERSION_MINIMUM="${CMAKE_POLICY_VERSION_MINIMUM:-3.5}"
export CXXFLAGS="${CXXFLAGS:+$CXXFLAGS }-include cstdint -include string -include stdexcept"
export HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_TENSORFLOW=1 \
    HOROVOD_WITHOUT_MXNET=1 MAKEFLAGS="-j$jobs"
if [ "$mpi" = yes ]; then export HOROVOD_WITH_MPI=1; else export HOROVOD_WITHOUT_MPI=1; fi
if [ "$gpu" = NCCL ]; then
    if [ "$cuda_from" = wheels ]; then
        # nvcc, its crt headers, nvvm (cicc), cudart (headers, static library), cccl: one tree.
        pip_install --find-links "$wheelhouse" --no-deps --target "$workdir/cuda" \
            "$wheelhouse"/nvidia_cuda_nvcc-*.whl "$wheelhouse"/nvidia_cuda_crt-*.whl \
            "$wheelhouse"/nvidia_nvvm-*.whl "$wheelhouse"/nvidia_cuda_runtime-*.whl \
            "$wheelhouse"/nvidia_cuda_cccl-*.whl >>"$log" 2>&1 ||
            { tail -n 20 "$log" >&2; die "laying out the nvcc wheels of $wheelhouse failed (log: $log)"; }
        [ -x "$cuda_home/bin/nvcc" ] || die "the nvcc wheels did not lay out $cuda_home/bin/nvcc"
        # nvcc.profile links from lib64 (a toolkit's name), the wheels install lib.
        [ -e "$cuda_home/lib64" ] || ln -s lib "$cuda_home/lib64"
    fi
    # Patch 2 (above): unversioned names for CMake's find_library, pointing at the libraries
    # that run (torch's cudart if it has one, the NCCL wheel's), and their directories as RPATH.
    links=$workdir/link
    mkdir -p "$links"
    cudart=$(compgen -G "$(py_pkg_dir nvidia.cu13)/lib/libcudart.so.*" | head -n 1) ||
        cudart=$(compgen -G "$cuda_home/lib*/libcudart.so*" | head -n 1) ||
        die "no libcudart.so* beside torch or in $cuda_home/lib*"
    ln -sf "$nccl_so" "$links/libnccl.so"
    ln -sf "$cudart" "$links/libcudart.so"
    export HOROVOD_GPU_OPERATIONS=NCCL HOROVOD_CUDA_HOME=$cuda_home CUDA_HOME=$cuda_home \
        HOROVOD_NCCL_INCLUDE=$nccl_home/include HOROVOD_NCCL_LIB=$links HOROVOD_NCCL_LINK=SHARED \
        CMAKE_LIBRARY_PATH=$links${CMAKE_LIBRARY_PATH:+:$CMAKE_LIBRARY_PATH}
    export PATH=$cuda_home/bin:$PATH
    LDFLAGS="${LDFLAGS:+$LDFLAGS }-Wl,-rpath,$(dirname "$nccl_so"):$(dirname "$cudart")"
    export LDFLAGS
    # Kernels for every architecture this nvcc knows (Horovod's default) unless told otherwise.
    if [ -n "${HOROVOD_BUILD_CUDA_CC_LIST:-}" ]; then note "CUDA architectures $HOROVOD_BUILD_CUDA_CC_LIST"; fi
fi

note "building (log: $log)"
start=$(date +%s)
if ! (cd "$src" && "$python" -m pip install --no-cache-dir --disable-pip-version-check --no-index \
        --no-deps --no-build-isolation "${target_args[@]}" -v .) >>"$log" 2>&1; then
    tail -n 40 "$log" >&2
    die "building horovod $version failed after $(( $(date +%s) - start )) s (log: $log, sources kept in $src)"
fi
note "built and installed in $(( $(date +%s) - start )) s"
# Only the log stays (the sources, the nvcc tree and the links are build-time only).
rm -rf "$src" "$workdir/cuda" "$workdir/link"
exit 0
