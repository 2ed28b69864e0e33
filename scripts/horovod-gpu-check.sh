#!/usr/bin/env bash
# Horovod with NCCL on a machine with a GPU, proven: build it with the images' own recipe
# (containers/files/horovod-build.sh: the same patch, the same settings), print
# `horovodrun --check-build`, and allreduce CUDA tensors in one process through Horovod's NCCL
# operations (containers/files/horovod_check.py --cuda, with NCCL_DEBUG=INFO).
#
#   scripts/horovod-gpu-check.sh [options] DIR   build and check, offline
#   scripts/horovod-gpu-check.sh --fetch DIR     fill DIR from PyPI (on a machine with PyPI)
#
#   DIR          horovod-0.28.1.tar.gz and the wheels of its dependencies (--fetch makes it:
#                CPython 3.10-3.14, x86_64 and aarch64, about 25 MiB)
#   --python PY  the interpreter whose CUDA torch Horovod is built against (default: python3).
#                Nothing is installed into its environment: Horovod and its dependencies go
#                to WORK/site and are used through PYTHONPATH.
#   --work DIR   build and install there (default: a new temporary directory)
#   --jobs N     parallel compile jobs (default: nproc)
#   --cuda-home DIR, --nccl-home DIR   passed on to horovod-build.sh (default there: $CUDA_HOME
#                or `nvcc` on PATH or /usr/local/cuda; the nvidia-nccl wheel beside torch)
#   --dry-run    check the inputs and print the build's settings, build nothing
#   --build-only build and run `horovodrun --check-build` without a GPU (torch must still be a
#                CUDA build); no allreduce, and the last line says BUILD-ONLY, never PASS
# HOROVOD_BUILD_CUDA_CC_LIST defaults to this GPU's compute capability (the images build for
# every architecture their nvcc knows). MPI is built only where mpicxx is on PATH; the check
# runs under `horovodrun --gloo` either way. A copy of the build log goes to $OUT when set.
# The last line says HOROVOD_GPU_CHECK PASS or FAIL, with the numbers; exit 0 only on PASS.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
build_sh=$repo/containers/files/horovod-build.sh
check_py=$repo/containers/files/horovod_check.py
HOROVOD_VERSION=0.28.1
# Horovod's dependencies (horovod-build.sh's default --deps) and setuptools, which a venv of
# Python >= 3.12 lacks and setup.py needs.
DEPS="cloudpickle psutil packaging pyyaml cffi wheel setuptools"

fail() { echo "HOROVOD_GPU_CHECK FAIL $*"; exit 1; }
die() { echo "horovod-gpu-check: $*" >&2; exit 2; }

fetch() {
    local dir=$1 py arch n plat
    local pip=(python3 -m pip)
    [ -n "${PIP:-}" ] && read -r -a pip <<<"$PIP"
    mkdir -p "$dir"
    "${pip[@]}" download --isolated -q -d "$dir" --no-deps --no-binary :all: "horovod==$HOROVOD_VERSION" ||
        die "pip download of horovod==$HOROVOD_VERSION's sdist failed (see above)"
    for arch in x86_64 aarch64; do
        plat=(--platform "manylinux2014_$arch")
        for n in $(seq 17 39); do plat+=(--platform "manylinux_2_${n}_$arch"); done
        for py in 3.10 3.11 3.12 3.13 3.14; do
            # shellcheck disable=SC2086  # a list of names
            "${pip[@]}" download --isolated -q -d "$dir" --only-binary :all: "${plat[@]}" \
                --python-version "$py" --implementation cp $DEPS ||
                die "pip download of Horovod's dependencies for CPython $py on $arch failed (see above)"
        done
    done
    echo "horovod-gpu-check: $dir holds $(find "$dir" -maxdepth 1 -type f | wc -l) files, $(du -sh "$dir" | cut -f1)"
}

python=python3 work="" jobs="" dry_run=0 build_only=0 dir="" pass_on=()
while [ "$#" -gt 0 ]; do
    case $1 in
        --fetch)
            [ "$#" -eq 2 ] || die "usage: horovod-gpu-check.sh --fetch DIR"
            fetch "$2"; exit 0 ;;
        --python|--work|--jobs|--cuda-home|--nccl-home)
            if [ "$#" -lt 2 ] || [ -z "$2" ] || [[ $2 == --* ]]; then die "$1 needs a value"; fi
            case $1 in
                --python) python=$2 ;; --work) work=$2 ;; --jobs) jobs=$2 ;;
                *) pass_on+=("$1" "$2") ;;
            esac
            shift 2 ;;
        --dry-run) dry_run=1; shift ;;
        --build-only) build_only=1; shift ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
        -*) die "unknown option $1 (--help lists them)" ;;
        *) [ -z "$dir" ] || die "one DIR only, got '$dir' and '$1'"; dir=$1; shift ;;
    esac
done
[ -n "$dir" ] || die "no DIR given: horovod-gpu-check.sh [options] DIR (DIR from --fetch DIR; --help)"
[ -d "$dir" ] || die "DIR $dir is not a directory (make it with: scripts/horovod-gpu-check.sh --fetch $dir)"
sdist=$dir/horovod-$HOROVOD_VERSION.tar.gz
[ -f "$sdist" ] || die "$sdist missing (make DIR with: scripts/horovod-gpu-check.sh --fetch $dir)"
[ -z "$jobs" ] && jobs=$(nproc)
[[ $jobs =~ ^[1-9][0-9]*$ ]] || die "--jobs $jobs: expected a positive number"
command -v "$python" >/dev/null || die "--python $python not found"

# The GPU and torch, before minutes of building. Without a GPU only --dry-run and --build-only
# go on (and build for every architecture nvcc knows, as the images do).
gpu_info=$(NEED_GPU=$(( 1 - (dry_run | build_only) )) "$python" - <<'PY' 2>&1
import os
try:
    import torch
except ImportError as e:
    raise SystemExit(f"cannot import torch: {e}")
if torch.version.cuda is None:
    raise SystemExit(f"torch {torch.__version__} is a CPU build (torch.version.cuda is None)")
if not torch.cuda.is_available():
    if os.environ["NEED_GPU"] == "1":
        raise SystemExit(f"torch {torch.__version__} sees no GPU (torch.cuda.is_available() is False)")
    print(torch.__version__, torch.version.cuda, "-", 0, "none")
    raise SystemExit(0)
major, minor = torch.cuda.get_device_capability(0)
print(torch.__version__, torch.version.cuda, f"{major}{minor}", torch.cuda.device_count(),
      torch.cuda.get_device_name(0).replace(" ", "_"))
PY
) || fail "$(echo "$gpu_info" | tail -n 1) ($python)"
read -r torch_version torch_cuda cc gpus gpu_name <<<"$gpu_info"
if [ "$cc" = - ]; then
    echo "horovod-gpu-check: torch $torch_version (CUDA $torch_cuda) from $python; no GPU visible"
else
    echo "horovod-gpu-check: torch $torch_version (CUDA $torch_cuda) from $python; $gpus GPU(s), GPU 0: ${gpu_name//_/ } (sm_$cc)"
    export HOROVOD_BUILD_CUDA_CC_LIST=${HOROVOD_BUILD_CUDA_CC_LIST:-$cc}
fi

made_work=0
if [ -z "$work" ]; then work=$(mktemp -d "${TMPDIR:-/tmp}/horovod-gpu-check.XXXXXX"); made_work=1; fi
mkdir -p "$work"
work=$(cd "$work" && pwd)
build_args=(--python "$python" --wheelhouse "$dir" --deps "$DEPS" --target "$work/site" --gpu NCCL
            --mpi auto --jobs "$jobs" --workdir "$work/build" --log "$work/build.log" "${pass_on[@]}")
if [ "$dry_run" = 1 ]; then
    bash "$build_sh" "${build_args[@]}" --dry-run "$sdist"
    if [ "$made_work" = 1 ]; then rm -rf "$work"; fi
    exit 0
fi

start=$(date +%s)
bash "$build_sh" "${build_args[@]}" "$sdist" || {
    if [ -n "${OUT:-}" ]; then cp "$work/build.log" "$OUT/horovod-build.log" 2>/dev/null || true; fi
    fail "building horovod $HOROVOD_VERSION with NCCL failed after $(( $(date +%s) - start )) s (log: $work/build.log)"
}
build_s=$(( $(date +%s) - start ))
if [ -n "${OUT:-}" ]; then cp "$work/build.log" "$OUT/horovod-build.log" 2>/dev/null || true; fi

export PYTHONPATH=$work/site${PYTHONPATH:+:$PYTHONPATH}
horovodrun=("$python" "$work/site/bin/horovodrun")
check=$("${horovodrun[@]}" --check-build 2>&1) || fail "horovodrun --check-build failed: $(echo "$check" | tail -n 1)"
echo "$check"
grep -q '\[X\] NCCL' <<<"$check" || fail "horovodrun --check-build does not list NCCL (build ${build_s} s)"
if [ "$build_only" = 1 ]; then
    echo "HOROVOD_GPU_CHECK BUILD-ONLY horovod $HOROVOD_VERSION torch $torch_version: built with NCCL in ${build_s} s, check-build lists NCCL; no GPU run (--build-only)"
    exit 0
fi

start=$(date +%s)
out=$(NCCL_DEBUG=INFO timeout 300 "${horovodrun[@]}" -np 1 -H localhost:1 --gloo \
      "$python" "$check_py" --cuda 2>&1) && rc=0 || rc=$?
run_s=$(( $(date +%s) - start ))
echo "$out" | grep -E 'HOROVOD_|NCCL INFO (NCCL version|.*Init COMPLETE|comm )' | head -n 20
ok=$(grep -o 'HOROVOD_OK .*' <<<"$out" | head -n 1) || true
nccl=$(grep -o 'NCCL version [^ ]*' <<<"$out" | head -n 1) || true
if [ "$rc" != 0 ] || [ -z "$ok" ]; then
    echo "$out" | tail -n 30
    fail "1-process allreduce on the GPU: exit $rc after ${run_s} s, no HOROVOD_OK line (build ${build_s} s)"
fi
[ -n "$nccl" ] || fail "the allreduce passed but NCCL never initialised (no 'NCCL version' line with NCCL_DEBUG=INFO): $ok"
echo "HOROVOD_GPU_CHECK PASS horovod $HOROVOD_VERSION torch $torch_version ${gpu_name//_/ } sm_$cc, $nccl, check-build lists NCCL, build ${build_s} s, run ${run_s} s: ${ok#HOROVOD_OK }"
