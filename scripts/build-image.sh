#!/usr/bin/env bash
# Build the project's container images (called by `make image|horovod-image|enroot-image`).
#
#   build-image.sh base NAME [OUT]  containers/base-NAME.def -> build/base-NAME.sif (or OUT)
#   build-image.sh image NAME       containers/pytorch.def on build/base-NAME.sif -> image.sif
#   build-image.sh horovod NAME     containers/horovod.def on build/base-NAME.sif -> horovod.sif
#   build-image.sh launchers [SIF]  containers/launchers.def on image.sif -> launchers.sif
#   build-image.sh dockerfile PATH  PATH converted (jsc-compose dockerfile) -> build/dockerfile-NAME.sif
#                                   (dockerfile-base PATH), containers/pytorch.def on it -> image-NAME.sif
#                                   (dockerfile-layer PATH)
#   build-image.sh dockerfile-name PATH  print NAME (the Dockerfile's directory; DOCKERFILE_NAME)
#   build-image.sh enroot SIF SQSH  the SIF's root filesystem partition -> SQSH (Enroot/pyxis)
#   build-image.sh def DEF OUT      any definition file -> OUT (the tests' own images)
#   build-image.sh commit           print the git commit the image label records
#   build-image.sh prepare cuda     download and lay out the CUDA base's parts for ARCH only
#   build-image.sh paths NAME       print the base, image, horovod and launchers paths for
#                                   ARCH and base NAME (the Makefile's names; tests compare)
#
# ARCH (Debian names amd64|arm64; x86_64/aarch64 accepted; default: this host's) picks the
# architecture. amd64 outputs keep their names (image.sif, build/base-local.sif); others get
# -ARCH, and the CUDA base -cuda: build/base-cuda-arm64.sif, image-cuda-arm64.sif. A foreign
# ARCH runs its %post and %test under qemu-user-static (scripts/qemu-setup.sh registers it);
# pip never runs emulated: wheels are laid out on the host (pip --platform --target).
#
# Every output is written to a temporary name next to it and renamed only after the build
# (and, for images, `apptainer test`) succeeded: a failed or interrupted build leaves the
# previous image untouched and no half-written file. Failures end with one line saying
# what to do. Durations go to build/image-times.json (read by `make bench`).
# Environment: ARCH (above), FAKEROOT=1 (unprivileged build), COMPRESS (squashfs compressor: zstd,
# gzip, lz4, xz, lzo),
# TORCH_WHEEL (local base), DOCKER_FROM (docker base), NGC_FROM (ngc base), MIRROR (Debian mirror), PY (a host
# python with pip, for `pip download`; default: the project venv, else python3, else a small
# venv made here in build/tools-venv), PYPI_INDEX (the index the CUDA base's wheels come from;
# asked with pip --isolated so that a local find-links such as /opt/wheels cannot win);
# for `dockerfile`: DOCKER_BUILD_ARGS ("NAME=VALUE ..."), FROM_LOCAL ("IMAGE=SOURCE ...", a
# FROM's local copy: PATH.sif, docker-archive:PATH, oci-archive:PATH), DOCKER_CONTEXT (the
# build context, default the Dockerfile's directory), DOCKERFILE_NAME, COMPOSER_PY (a Python
# with PyYAML and spython; default: the venv's, else python3).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
build=$repo/build
TORCH_WHEEL=${TORCH_WHEEL:-/opt/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl}
DOCKER_FROM=${DOCKER_FROM:-pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime}
# NGC's PyTorch image (multi-arch: amd64 and arm64), the unprivileged base for JUPITER; also
# docker-archive:PATH or oci-archive:PATH (a copy made where the registry is reachable).
NGC_FROM=${NGC_FROM:-nvcr.io/nvidia/pytorch:25.12-py3}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
COMPRESS=${COMPRESS:-zstd}
PY=${PY:-}
PYPI_INDEX=${PYPI_INDEX:-https://pypi.org/simple}
HOROVOD_VERSION=0.28.1

die() { echo "build-image: $*" >&2; exit 1; }

# Debian architecture names; the kernel's (uname -m) are accepted too.
# Neither dpkg nor uname on PATH (a stripped environment): amd64, the build's own default.
host_arch() {
    local machine
    dpkg --print-architecture 2>/dev/null && return 0
    machine=$(uname -m 2>/dev/null) || machine=x86_64
    case $machine in
        x86_64) echo amd64 ;;
        aarch64) echo arm64 ;;
        *) echo "$machine" ;;
    esac
}
HOST_ARCH=$(host_arch)
ARCH=${ARCH:-$HOST_ARCH}
case $ARCH in
    amd64|x86_64) ARCH=amd64; MACHINE=x86_64 ;;
    arm64|aarch64) ARCH=arm64; MACHINE=aarch64 ;;
    *) die "ARCH=$ARCH: expected amd64 or arm64 (x86_64 and aarch64 are accepted too)" ;;
esac
case $COMPRESS in
    zstd|gzip|lz4|xz|lzo) ;;
    *) die "COMPRESS=$COMPRESS: expected a squashfs compressor: zstd (the default), gzip, lz4, xz or lzo" ;;
esac
# amd64 keeps the names every other target and test uses.
if [ "$ARCH" = amd64 ]; then ASFX=""; else ASFX="-$ARCH"; fi

git_commit() {
    local sha
    sha=$(git -C "$repo" rev-parse HEAD 2>/dev/null) || { echo unknown; return; }
    # "-dirty": the image holds uncommitted changes of what it is built from.
    if [ -n "$(git -C "$repo" status --porcelain -- launcher pyproject.toml containers 2>/dev/null)" ]; then
        sha="$sha-dirty"
    fi
    echo "$sha"
}

check_apptainer() {
    command -v apptainer >/dev/null ||
        die "apptainer not found on PATH: install Apptainer >= 1.1 (on this project's Debian hosts: sudo bash scripts/setup.sh), then rerun"
}

# Refuse early, before touching anything, when a build cannot work here.
preflight() {
    check_apptainer
    if [ "${FAKEROOT:-0}" != 1 ] && [ "$(id -u)" != 0 ]; then
        die "building images needs root: run as root (sudo make ...), or FAKEROOT=1 make ... to build unprivileged with apptainer build --fakeroot (needs /etc/subuid entries; the local base's debootstrap needs real root)"
    fi
    mkdir -p "$build/logs"
}

# debootstrap makes device nodes and chroots: real root only, which neither FAKEROOT=1
# (apptainer build --fakeroot) nor a user namespace gives; without root it fails late with
# errors that look like a mirror problem. BASE=local runs it in Apptainer's debootstrap
# bootstrap, BASE=cuda on the host (make_rootfs, after the 2.7 GB of wheels) unless cached.
# need_real_root NAME: refuse before any work.
need_real_root() {
    local name=$1
    [ "$(id -u)" = 0 ] && return 0
    case $name in
        local) ;;
        cuda) rootfs_cached && return 0 ;;
        *) return 0 ;;
    esac
    die "BASE=$name needs real root (uid $(id -u) here): its Debian root filesystem comes from debootstrap, which FAKEROOT=1 cannot run; without root: FAKEROOT=1 make image ARCH=$ARCH BASE=ngc (NGC's PyTorch image, unprivileged), or as root: sudo make image ARCH=$ARCH BASE=$name"
}

# mksquashfs's compressor options for COMPRESS (zstd: level 3, quick to build and to read).
comp_args() {
    case $COMPRESS in
        zstd) echo "-comp zstd -Xcompression-level 3" ;;
        *) echo "-comp $COMPRESS" ;;
    esac
}

# Options every `apptainer build` gets.
build_options() {
    local opts=(--notest)
    if [ "${FAKEROOT:-0}" = 1 ]; then opts+=(--fakeroot); fi
    [ "$COMPRESS" = gzip ] || opts+=(--mksquashfs-args "$(comp_args)")
    printf '%s\0' "${opts[@]}"
}

# Concurrent makes (tests, demo, users) build one after the other, and a make that waited
# while another one wrote the same output uses that output (its inputs were the same).
# lock_or_skip OUT: returns 1 when OUT was replaced while waiting.
lock_or_skip() {
    local out=$1 before
    before=$(stat -c %Y.%i "$out" 2>/dev/null || echo none)
    exec 9>"$build/.lock-$(basename "$out")"
    flock 9
    if [ "$before" != "$(stat -c %Y.%i "$out" 2>/dev/null || echo none)" ]; then
        echo "build-image: $out was just built by another run"
        return 1
    fi
}

# Hosts whose capability bounding set lacks CAP_SYS_RESOURCE (bit 24; this VM) make root
# builds fail in %post unless apptainer drops it; APPTAINER_* variables are scrubbed by
# build, the SINGULARITY_ spelling passes.
export_drop_caps() {
    local bnd
    bnd=$(awk '/^CapBnd:/ {print $2}' /proc/self/status)
    if (( ((16#$bnd) >> 24 & 1) == 0 )); then
        export SINGULARITY_DROP_CAPS=${SINGULARITY_DROP_CAPS:-CAP_SYS_RESOURCE}
    fi
}

# record KEY SECONDS: merge one duration into build/image-times.json.
record() {
    local key=$1 secs=$2
    mkdir -p "$build"
    python3 - "$build/image-times.json" "$key" "$secs" <<'PY'
import json, os, sys, time
path, key, secs = sys.argv[1], sys.argv[2], float(sys.argv[3])
try:
    with open(path) as f:
        data = json.load(f)
except (OSError, ValueError):
    data = {}
data[key] = round(secs, 1)
data.setdefault("_recorded", {})[key] = {
    "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    "loadavg_1m": round(os.getloadavg()[0], 1),  # other work on the machine skews timings
}
data["cpus"] = os.cpu_count()
tmp = path + ".tmp"
with open(tmp, "w") as f:
    json.dump(data, f, indent=1, sort_keys=True)
    f.write("\n")
os.replace(tmp, path)
PY
}

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

tmp_out=""
build_tmp=""
stage_dir=""
cleanup() {
    if [ -n "$tmp_out" ]; then rm -f "$tmp_out"; fi
    if [ -n "$build_tmp" ]; then rm -rf "$build_tmp"; fi
    if [ -n "$stage_dir" ]; then rm -rf "$stage_dir"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Apptainer unpacks the base and squashes the result in its temp dir: on tmpfs that is
# several times faster than on a busy disk. Only with ample memory; APPTAINER_TMPDIR wins.
choose_tmpdir() {
    local avail_kb
    [ -n "${APPTAINER_TMPDIR:-}" ] && return 0
    avail_kb=$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo)
    if [ -d /dev/shm ] && [ -w /dev/shm ] && (( avail_kb > 8 * 1024 * 1024 )); then
        build_tmp=$(mktemp -d /dev/shm/build-image.XXXXXX)
        export APPTAINER_TMPDIR=$build_tmp
    fi
}

# apptainer_build OUT DEF HINT [--build-arg K=V ...]: build into a temp name, keep a log;
# on failure print the log tail and HINT (what to do) as the last line.
apptainer_build() {
    local out=$1 def=$2 hint=$3
    shift 3
    local name log opts=()
    name=$(basename "$out")
    log=$build/logs/$name.log
    mkdir -p "$build/logs" "$(dirname "$out")"
    while IFS= read -r -d '' o; do opts+=("$o"); done < <(build_options)
    export_drop_caps
    choose_tmpdir
    tmp_out=$(dirname "$out")/.$name.tmp.$$
    rm -f "$tmp_out"
    echo "build-image: building $out from $def (log: ${log#"$repo"/})"
    if ! apptainer build "${opts[@]}" "$@" "$tmp_out" "$def" >"$log" 2>&1; then
        grep -E '^(FATAL|ERROR)' "$log" | tail -n 3 >&2 || true
        die "$hint (full log: ${log#"$repo"/})"
    fi
}

# run_test SIF LOGNAME: `apptainer test` before the image replaces the old one.
run_test() {
    local sif=$1 log=$build/logs/$2.test.log
    if ! timeout 900 apptainer test "$sif" >"$log" 2>&1; then
        tail -n 20 "$log" >&2
        die "the new image failed its %test, previous image kept (log: ${log#"$repo"/})"
    fi
}

commit_output() { mv -f "$tmp_out" "$1"; tmp_out=""; echo "build-image: wrote $1"; }

base_sif() { echo "$build/base-$1$ASFX.sif"; }
# image_tag NAME: what the layers built on base NAME add to their names (-cuda, -ngc, -arm64).
image_tag() { case $1 in cuda|ngc) echo "-$1$ASFX" ;; *) echo "$ASFX" ;; esac; }

# ngc_source: the bootstrap agent and source of NGC_FROM (a registry tag or a local archive).
ngc_source() {
    case $NGC_FROM in
        docker-archive:*|oci-archive:*)
            [ -f "${NGC_FROM#*:}" ] || die "NGC_FROM=$NGC_FROM: no such file (docker-archive:PATH or oci-archive:PATH, or a registry tag such as nvcr.io/nvidia/pytorch:25.12-py3)"
            echo "${NGC_FROM%%:*}"; echo "${NGC_FROM#*:}" ;;
        *://*) die "NGC_FROM=$NGC_FROM: give the registry image without a scheme (nvcr.io/nvidia/pytorch:TAG), or docker-archive:PATH / oci-archive:PATH" ;;
        *) echo docker; echo "$NGC_FROM" ;;
    esac
}

cmd_paths() {
    local name=${1:?base name} tag
    tag=$(image_tag "$name")
    printf '%s\n' "build/base-$name$ASFX.sif" "image$tag.sif" "horovod$tag.sif" "launchers$tag.sif"
}

# A foreign ARCH runs %post and %test emulated: register qemu first (root; idempotent).
# Its progress lines pass through (fd 3); its failure line becomes the cause in this one.
need_emulation() {
    local err
    [ "$ARCH" = "$HOST_ARCH" ] && return 0
    if ! err=$(bash "$repo/scripts/qemu-setup.sh" "$ARCH" 2>&1 >&3); then
        err=$(printf '%s\n' "$err" | tail -n 1)
        die "ARCH=$ARCH on this $HOST_ARCH host needs qemu-user-static registered: ${err#qemu-setup: }"
    fi
} 3>&1

base_desc() {
    case $1 in
        local) echo "debootstrap:bookworm+$(basename "$TORCH_WHEEL")" ;;
        docker) echo "docker://$DOCKER_FROM" ;;
        ngc) case $NGC_FROM in *-archive:*) echo "$NGC_FROM" ;; *) echo "docker://$NGC_FROM" ;; esac ;;
        cuda) echo "debootstrap:bookworm/$ARCH+pypi:torch==$(pin torch)" ;;
        *) echo "$1" ;;
    esac
}

# pip_python: the host Python that runs `pip download` (only pip is needed, not the project's
# venv, which `make setup` makes as root; a login node has none). Sets PY.
pip_python() {
    local venv=${VENV:-$repo/.venv} tools=$build/tools-venv
    if [ -n "$PY" ]; then
        "$PY" -m pip --version >/dev/null 2>&1 || die "PY=$PY cannot run pip ($PY -m pip --version failed): point PY at a Python with pip, or unset it"
        return 0
    fi
    for PY in "$venv/bin/python" "$tools/bin/python" python3; do
        "$PY" -m pip --version >/dev/null 2>&1 && return 0
    done
    command -v python3 >/dev/null || die "python3 not found: pip download needs a Python 3 with pip (or set PY=/path/to/python)"
    echo "build-image: no Python with pip here; making one in ${tools#"$repo"/} (python3 -m venv)"
    rm -rf "$tools"
    if ! python3 -m venv "$tools" >/dev/null 2>&1 || ! "$tools/bin/python" -m pip --version >/dev/null 2>&1; then
        die "python3 has no pip and cannot make a venv (python3 -m venv failed): install python3-venv or python3-pip (Debian), or set PY=/path/to/python-with-pip"
    fi
    PY=$tools/bin/python
}

# pip_download LOGNAME WHAT PIP-ARGS...: `pip download`; on failure pip's own error lines and
# what failed, instead of a guess at the cause.
pip_download() {
    local log=$build/logs/$1.log what=$2
    shift 2
    pip_python
    mkdir -p "$build/logs"
    if ! "$PY" -m pip download "$@" >"$log" 2>&1; then
        grep -E '^(ERROR|error):' "$log" | tail -n 3 >&2 || true
        die "pip download of $what failed, see above (full log: ${log#"$repo"/}; pip: $PY)"
    fi
}

# Host-side wheelhouse: pip inside the container cannot verify HTTPS on every site.
fill_torch_wheelhouse() {
    local dir=$build/wheelhouse/torch stamp
    [ -f "$TORCH_WHEEL" ] ||
        die "torch wheel $TORCH_WHEEL not found: set TORCH_WHEEL=/path/to/torch-*-cp311-*.whl, or use BASE=docker"
    stamp=$dir/.complete-$(basename "$TORCH_WHEEL")
    [ -f "$stamp" ] && return 0
    rm -rf "$dir"
    mkdir -p "$dir"
    pip_download wheelhouse-torch "torch's dependencies into ${dir#"$repo"/}" -q -d "$dir" \
        --only-binary :all: --find-links "$(dirname "$TORCH_WHEEL")" "$TORCH_WHEEL" numpy
    touch "$stamp"
}

# Horovod's runtime deps, plus what its setup.py needs at build time (cffi, wheel); the same
# list as containers/files/horovod-build.sh's --deps default (tests/unit/test_horovod_cuda.py).
HOROVOD_DEPS=(cloudpickle psutil packaging pyyaml cffi wheel)
# nvcc from PyPI for Horovod's NCCL build on the CUDA base (build time only).
CUDA_NVCC_REQ=$repo/requirements/cuda-nvcc.txt

# horovod_wheelhouse NAME: where fill_horovod_wheelhouse NAME puts the sdist and wheels.
horovod_wheelhouse() {
    if [ "$1" = cuda ]; then echo "$build/wheelhouse/horovod-cuda-$ARCH"; else echo "$build/wheelhouse/horovod"; fi
}

# The sdist and the deps; for the CUDA base also the nvcc wheels, both for ARCH from PyPI.
fill_horovod_wheelhouse() {
    local name=$1 dir stamp args=()
    dir=$(horovod_wheelhouse "$name")
    if [ "$name" = cuda ]; then
        while IFS= read -r -d '' o; do args+=("$o"); done < <(pypi_args; platform_args)
    fi
    stamp=$dir/.complete-$HOROVOD_VERSION-$( { echo "${HOROVOD_DEPS[*]}"; [ "$name" != cuda ] || cat "$CUDA_NVCC_REQ"; } | md5sum | cut -c1-8)
    [ -f "$stamp" ] && return 0
    mkdir -p "$dir"
    pip_download wheelhouse-horovod "horovod $HOROVOD_VERSION's sdist" -q -d "$dir" \
        --no-deps --no-binary :all: "horovod==$HOROVOD_VERSION"
    pip_download wheelhouse-horovod-deps "horovod's dependencies" -q -d "$dir" \
        "${args[@]}" --only-binary :all: "${HOROVOD_DEPS[@]}"
    if [ "$name" = cuda ]; then
        pip_download "wheelhouse-horovod-nvcc-$ARCH" "the nvcc wheels (${CUDA_NVCC_REQ#"$repo"/}) for $ARCH" \
            -q -d "$dir" "${args[@]}" --only-binary :all: --no-deps -r "$CUDA_NVCC_REQ"
    fi
    touch "$stamp"
}

# The launchers (requirements/launchers.txt): wheels for the image's Python, and deepspeed's
# sdist (built inside the image against its torch). One directory per version of the pins.
LAUNCHERS_REQ=$repo/requirements/launchers.txt

fill_launchers_wheelhouse() {
    local dir=$build/wheelhouse/launchers$ASFX stamp pyver plat=()
    [ -f "$LAUNCHERS_REQ" ] || die "$LAUNCHERS_REQ missing: the launchers' pins come with the repository"
    stamp=$dir/.complete-$(md5sum <"$LAUNCHERS_REQ" | cut -c1-12)
    [ -f "$stamp" ] && return 0
    pip_python
    # The wheels must fit the image's Python (bookworm's and the docker base's 3.11).
    pyver=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    [ "$pyver" = 3.11 ] ||
        die "pip download for the image needs a host Python 3.11 (the image's), $PY is $pyver: set PY=/path/to/python3.11"
    # Another architecture's wheels: named platform tags (--no-deps makes pip accept them).
    if [ "$ARCH" != "$HOST_ARCH" ]; then
        while IFS= read -r -d '' o; do plat+=("$o"); done < <(platform_args)
    fi
    rm -rf "$dir"
    mkdir -p "$dir"
    pip_download "wheelhouse-launchers$ASFX" "the launchers' pins (${LAUNCHERS_REQ#"$repo"/})" -q -d "$dir" \
        "${plat[@]}" --no-deps --only-binary :all: --no-binary deepspeed -r "$LAUNCHERS_REQ"
    touch "$stamp"
}

# --- The CUDA base (containers/base-cuda.def): Debian from its mirror, torch from PyPI ------
CUDA_REQ=$repo/requirements/cuda.txt
CUDA_DEBS=$repo/requirements/cuda-debian.txt

# pin NAME: the version requirements/cuda.txt pins NAME to.
pin() {
    local v
    v=$(sed -n "s/^$1==\([^ ;#]*\).*/\1/p" "$CUDA_REQ")
    [ -n "$v" ] || die "${CUDA_REQ#"$repo"/} pins no $1 (NAME==VERSION): it comes with the repository"
    echo "$v"
}

# pip's --platform takes tags literally (manylinux_2_28 does not imply _2_17): list every
# manylinux tag bookworm's glibc 2.36 runs, as pip would on a native host.
platform_args() {
    local n
    printf '%s\0' --platform "manylinux2014_$MACHINE"
    for n in $(seq 17 36); do printf '%s\0' --platform "manylinux_2_${n}_$MACHINE"; done
    printf '%s\0' --python-version 3.11 --implementation cp --abi cp311
}

# PyPI explicitly: this machine's pip configuration adds /opt/wheels (a CPU torch) and a
# constraints file; --isolated ignores both. PIP_CERT (a site's proxy CA) is kept.
pypi_args() {
    printf '%s\0' --isolated --index-url "$PYPI_INDEX"
    if [ -n "${PIP_CERT:-}" ]; then printf '%s\0' --cert "$PIP_CERT"; fi
}

# The pinned wheels for ARCH (about 2.7 GB), downloaded once; pip skips files it has.
fill_cuda_wheelhouse() {
    local dir=$build/wheelhouse/cuda-$ARCH stamp args=() start
    stamp=$dir/.complete-$(md5sum <"$CUDA_REQ" | cut -c1-12)
    [ -f "$stamp" ] && return 0
    while IFS= read -r -d '' o; do args+=("$o"); done < <(pypi_args; platform_args)
    mkdir -p "$dir"
    start=$(now)
    pip_download "wheelhouse-cuda-$ARCH" "the CUDA base's pins (${CUDA_REQ#"$repo"/}) for $ARCH from $PYPI_INDEX" \
        "${args[@]}" --only-binary=:all: --no-deps -q -d "$dir" -r "$CUDA_REQ"
    record "wheelhouse-cuda-${ARCH}_download_s" "$(elapsed "$start")"
    touch "$stamp"
}

# site-packages laid out on the host for ARCH (pip --target with --platform: nothing of pip
# runs emulated); base-cuda.def moves it into the image's dist-packages.
stage_cuda_site() {
    local dir=$build/stage/site-cuda-$ARCH stamp args=()
    stamp=$dir.complete-$(md5sum <"$CUDA_REQ" | cut -c1-12)
    [ -f "$stamp" ] && [ -d "$dir" ] && return 0
    while IFS= read -r -d '' o; do args+=("$o"); done < <(platform_args)
    pip_python
    rm -rf "$dir" "$build/stage/site-cuda-$ARCH.complete-"*
    mkdir -p "$build/logs"
    if ! "$PY" -m pip install --isolated --no-index --find-links "$build/wheelhouse/cuda-$ARCH" \
            --no-deps --only-binary=:all: "${args[@]}" --target "$dir" -r "$CUDA_REQ" \
            >"$build/logs/stage-cuda-$ARCH.log" 2>&1; then
        grep -E '^(ERROR|error):' "$build/logs/stage-cuda-$ARCH.log" | tail -n 3 >&2 || true
        die "pip install --target of the CUDA pins failed (log: build/logs/stage-cuda-$ARCH.log)"
    fi
    touch "$stamp"
}

# Debian bookworm for ARCH via the host's debootstrap (Apptainer's debootstrap bootstrap always
# takes the host's architecture); cached per package list and mirror. Its second stage runs
# emulated for a foreign ARCH. The Debian versions are checked against the pins afterwards.
rootfs_pkgs() {
    local pkgs
    pkgs=$(sed -e 's/#.*//' -e 's/=.*//' "$CUDA_DEBS" | xargs | tr ' ' ,)
    [ -n "$pkgs" ] || die "${CUDA_DEBS#"$repo"/} lists no packages"
    echo "$pkgs"
}
rootfs_stamp() {  # the file that says build/rootfs/bookworm-ARCH is complete for these inputs
    echo "$build/rootfs/bookworm-$ARCH.complete-$(printf '%s %s' "$(rootfs_pkgs)" "$MIRROR" | md5sum | cut -c1-12)"
}
rootfs_cached() { [ -f "$(rootfs_stamp)" ] && [ -d "$build/rootfs/bookworm-$ARCH" ]; }

make_rootfs() {
    local dir=$build/rootfs/bookworm-$ARCH stamp pkgs log=$build/logs/rootfs-$ARCH.log start
    pkgs=$(rootfs_pkgs)
    stamp=$(rootfs_stamp)
    rootfs_cached && return 0
    command -v debootstrap >/dev/null || die "debootstrap not found: apt-get install debootstrap (or sudo make setup)"
    rm -rf "$dir" "$build/rootfs/bookworm-$ARCH.complete-"*
    mkdir -p "$build/rootfs" "$build/logs"
    echo "build-image: debootstrap bookworm/$ARCH into ${dir#"$repo"/} (log: ${log#"$repo"/})"
    start=$(now)
    if ! debootstrap --arch="$ARCH" --variant=minbase --exclude=openssl,udev,debconf-i18n,e2fsprogs \
            --include="apt,$pkgs" bookworm "$dir" "$MIRROR" >"$log" 2>&1; then
        tail -n 3 "$log" >&2
        die "debootstrap of bookworm/$ARCH failed: check http access to $MIRROR (MIRROR=... picks another)"
    fi
    record "rootfs-${ARCH}_debootstrap_s" "$(elapsed "$start")"
    touch "$stamp"
}

# prepare_cuda: everything the CUDA base needs on the host, once per ARCH (a lock, so that
# `build-image.sh prepare cuda` may run beside a build).
prepare_cuda() {
    local start
    mkdir -p "$build"
    exec 8>"$build/.lock-prepare-cuda-$ARCH"
    flock 8
    start=$(now)
    fill_cuda_wheelhouse
    stage_cuda_site
    make_rootfs
    record "base-cuda${ASFX}_prepare_s" "$(elapsed "$start")"
    exec 8>&-
}

cmd_prepare() {
    [ "${1:-}" = cuda ] || die "usage: build-image.sh prepare cuda (downloads and lays out the CUDA base's parts for ARCH)"
    need_real_root cuda
    preflight
    need_emulation
    prepare_cuda
}

cmd_base() {
    local name=${1:?base name: local, docker, cuda or ngc} out=${2:-} start hint args=() arch_opt=() src=()
    [ -n "$out" ] || out=$(base_sif "$name")
    [ -f "containers/base-$name.def" ] || die "unknown base '$name': use BASE=local, BASE=docker, BASE=cuda or BASE=ngc (containers/base-*.def)"
    if [ "$name" = ngc ]; then mapfile -t src < <(ngc_source); [ "${#src[@]}" = 2 ] || exit 1; fi
    # Apptainer's debootstrap bootstrap always takes the host's architecture, and PyPI has no
    # CPU torch for aarch64 (its 2.13 wheel is the CUDA 13 build): a foreign ARCH uses BASE=cuda.
    if [ "$name" = local ] && [ "$ARCH" != "$HOST_ARCH" ]; then
        die "BASE=local builds only for this host's architecture ($HOST_ARCH), not ARCH=$ARCH: make image ARCH=$ARCH BASE=cuda (torch from PyPI, the default for ARCH=arm64)"
    fi
    need_real_root "$name"
    preflight
    need_emulation
    lock_or_skip "$out" || return 0
    case $name in
        local)
            fill_torch_wheelhouse
            args=(--build-arg "MIRROR=$MIRROR" --build-arg "WHEELHOUSE=$build/wheelhouse/torch"
                  --build-arg "TORCH_REQ=torch==$(basename "$TORCH_WHEEL" | cut -d- -f2)"
                  --build-arg "FILES=$repo/containers/files")
            hint="could not build the local base: check http access to $MIRROR (MIRROR=... picks another Debian mirror)" ;;
        docker)
            args=(--build-arg "FROM=$DOCKER_FROM" --build-arg "FILES=$repo/containers/files")
            # A registry base of another architecture: the image index's ARCH entry.
            if [ "$ARCH" != "$HOST_ARCH" ]; then arch_opt=(--arch "$ARCH"); fi
            hint="could not fetch docker://$DOCKER_FROM for $ARCH: check registry access (or apptainer registry login) and that the tag has a linux/$ARCH image, or build on the local base: make image BASE=local" ;;
        ngc)
            args=(--build-arg "BOOTSTRAP=${src[0]}" --build-arg "FROM=${src[1]}"
                  --build-arg "FILES=$repo/containers/files")
            # The registry's index entry for ARCH; an archive holds one architecture already.
            if [ "$ARCH" != "$HOST_ARCH" ] && [ "${src[0]}" = docker ]; then arch_opt=(--arch "$ARCH"); fi
            if [ "${src[0]}" != docker ]; then
                hint="could not build on $(base_desc ngc): check that ${src[1]} is a ${src[0]} of a linux/$ARCH image with python3 and torch"
            else
                hint="could not build on $(base_desc ngc) for $ARCH: check access to nvcr.io (apptainer registry login --username '\$oauthtoken' docker://nvcr.io for private tags) and that the tag has a linux/$ARCH image, or copy it elsewhere (docker save / skopeo copy) and pass NGC_FROM=docker-archive:PATH"
            fi ;;
        cuda)
            prepare_cuda
            args=(--build-arg "ROOTFS=$build/rootfs/bookworm-$ARCH"
                  --build-arg "SITE=$build/stage/site-cuda-$ARCH"
                  --build-arg "FILES=$repo/containers/files" --build-arg "DEBS=$CUDA_DEBS"
                  --build-arg "BASE_DESC=$(base_desc cuda)"
                  --build-arg "TORCH_VERSION=$(pin torch)"
                  --build-arg "CUDA_VERSION=$(pin cuda-toolkit | cut -d. -f1,2)"
                  --build-arg "NCCL_VERSION=$(pin nvidia-nccl-cu13)")
            hint="could not build the CUDA base for $ARCH" ;;
        *) hint="could not build base '$name'" ;;
    esac
    start=$(now)
    apptainer_build "$out" "containers/base-$name.def" "$hint" "${arch_opt[@]}" "${args[@]}"
    record "base-${name}${ASFX}_build_s" "$(elapsed "$start")"
    start=$(now)
    run_test "$tmp_out" "base-$name$ASFX"
    record "base-${name}${ASFX}_test_s" "$(elapsed "$start")"
    commit_output "$out"
}

# A private copy per run: concurrent builds (other outputs) must not see a half-made one.
stage_launcher() {
    local stage
    mkdir -p "$build/stage"
    stage=$(mktemp -d "$build/stage/launcher-src.XXXXXX")
    local extra=()
    for f in README.md LICENSE; do [ -f "$f" ] && extra+=("$f"); done
    tar -cf - --exclude=__pycache__ --exclude='*.pyc' pyproject.toml launcher "${extra[@]}" |
        tar -xf - -C "$stage"
    echo "$stage"
}

# cmd_image NAME [OUT [BASE_SIF BASE_DESC RUNSCRIPT]]: containers/pytorch.def on a base.
# RUNSCRIPT=image keeps the base's runscript (a Dockerfile's ENTRYPOINT + CMD) and only warns
# when the base lacks the verbs libraries (cmd_dockerfile); kit: the kit's own (default).
cmd_image() {
    local name=${1:?base name} out=${2:-} base=${3:-} desc=${4:-} runscript=${5:-kit} start stage
    local key verbs=required
    [ -n "$out" ] || out=$repo/image$(image_tag "$name").sif
    [ -n "$base" ] || base=$(base_sif "$name")
    [ -n "$desc" ] || desc=$(base_desc "$name")
    [ "$runscript" = kit ] || verbs=warn
    # the kit's images keep their log names (build/logs/image.test.log, image_build_s); a
    # Dockerfile's image is named by its output
    if [ "$runscript" = kit ]; then key=image$(image_tag "$name"); else key=$(basename "$out" .sif); fi
    preflight
    need_emulation
    lock_or_skip "$out" || return 0
    [ -f "$base" ] || die "base image $base missing: make base-image BASE=$name ARCH=$ARCH (make image builds it)"
    stage=$(stage_launcher)
    stage_dir=$stage
    start=$(now)
    apptainer_build "$out" containers/pytorch.def "could not build $out on $base" \
        --build-arg "BASE_SIF=$base" --build-arg "BASE_DESC=$desc" \
        --build-arg "GIT_COMMIT=$(git_commit)" --build-arg "LAUNCHER_SRC=$stage" \
        --build-arg "FILES=$repo/containers/files" --build-arg "RUNSCRIPT=$runscript" \
        --build-arg "VERBS=$verbs"
    record "${key//-/_}_build_s" "$(elapsed "$start")"
    start=$(now)
    run_test "$tmp_out" "$key"
    if grep -q '^VERBS_MISSING' "$build/logs/$key.test.log"; then
        echo "build-image: warning: $(grep -m1 '^VERBS_MISSING' "$build/logs/$key.test.log") (in the Dockerfile)" >&2
    fi
    record "${key//-/_}_test_s" "$(elapsed "$start")"
    commit_output "$out"
}

# --- A Dockerfile (docs/guide/runtimes.md#from-a-dockerfile) -------------------------------
# dockerfile_name PATH: DOCKERFILE_NAME, else the Dockerfile's directory (plus what its file
# name adds to "Dockerfile": proj/Dockerfile.gpu -> proj-gpu), lower case, [a-z0-9_.-].
dockerfile_name() {
    local df=$1 name file
    if [ -n "${DOCKERFILE_NAME:-}" ]; then
        name=$DOCKERFILE_NAME
    else
        name=$(basename "$(cd "$(dirname "$df")" && pwd)")
        file=$(basename "$df")
        file=${file//Dockerfile/}
        file=${file//dockerfile/}
        file=${file//./}
        if [ -n "$file" ]; then name=$name-$file; fi
    fi
    printf '%s' "$name" | tr '[:upper:]' '[:lower:]' | tr -c 'a-z0-9_.-' '-'
}

# The composer (jsc-compose dockerfile) needs PyYAML and spython, not torch.
composer_python() {
    local py
    for py in ${COMPOSER_PY:-} "${VENV:-$repo/.venv}/bin/python" python3; do
        if "$py" -c 'import yaml, spython' 2>/dev/null; then echo "$py"; return 0; fi
    done
    die "converting a Dockerfile needs a Python with PyYAML and spython: pip install pyyaml spython==0.3.14 (or pip install '.[dockerfile]' into a venv, then VENV=that venv), or COMPOSER_PY=/path/to/python"
}

# local_froms DEF: the local files a definition's stages bootstrap from (a SIF, an archive).
local_froms() {
    awk '/^Bootstrap: (localimage|docker-archive|oci-archive)$/ {want = 1; next}
         want && /^From: / {print substr($0, 7)} {want = 0}' "$1"
}
# newer_than FILE: true when a path on stdin is newer than FILE (a local base was replaced).
newer_than() {
    local path
    while IFS= read -r path; do
        if [ "$path" -nt "$1" ]; then return 0; fi
    done
    return 1
}

# dockerfile_paths PATH: sets name, base (the Dockerfile's image), def and out (the layer).
dockerfile_paths() {
    [ -n "${1:-}" ] || die "usage: build-image.sh dockerfile|dockerfile-base|dockerfile-layer PATH (make image DOCKERFILE=PATH)"
    [ -f "$1" ] || die "DOCKERFILE=$1: no such file"
    name=$(dockerfile_name "$1")
    base=$build/dockerfile-$name$ASFX.sif
    def=$build/dockerfile-$name$ASFX.def
    out=$repo/image-$name$ASFX.sif
}

# The Dockerfile converted and built as it is: build/dockerfile-NAME.sif, left untouched when
# its definition, its build context and its local FROM files are unchanged (make's test).
cmd_dockerfile_base() {
    local df=${1:-} name base def out py context args=() arch_opt=() word start
    dockerfile_paths "$df"
    context=${DOCKER_CONTEXT:-$(dirname "$df")}
    preflight
    need_emulation
    py=$(composer_python) || exit 1
    for word in ${DOCKER_BUILD_ARGS:-}; do args+=(--build-arg "$word"); done
    for word in ${FROM_LOCAL:-}; do args+=(--from-local "$word"); done
    args+=(--context "$context" --arch "$ARCH")
    # The conversion's notes (what did not carry over) pass through to the user, one line each.
    "$py" -m launcher dockerfile "$df" -o "$def.new" "${args[@]}" ||
        die "$df was not converted: the line above says why (jsc-compose dockerfile $df prints the definition)"
    lock_or_skip "$base" || true
    if [ -f "$base" ] && cmp -s "$def.new" "$def" && [ -z "$(find "$context" -newer "$base" -print -quit)" ] &&
        ! local_froms "$def" | newer_than "$base"; then
        rm -f "$def.new"
        echo "build-image: $base is up to date (its definition and build context are unchanged)"
        return 0
    fi
    mv -f "$def.new" "$def"
    # A registry FROM of another architecture: the image index's ARCH entry.
    if [ "$ARCH" != "$HOST_ARCH" ]; then arch_opt=(--arch "$ARCH"); fi
    start=$(now)
    apptainer_build "$base" "$def" "could not build $df's image from ${def#"$repo"/}: the log's last lines say which step; a FROM the registry does not serve here can come from a local copy (FROM_LOCAL='IMAGE=docker-archive:PATH')" "${arch_opt[@]}"
    record "dockerfile_${name//-/_}${ASFX//-/_}_build_s" "$(elapsed "$start")"
    commit_output "$base"
}

# The launcher layer (containers/pytorch.def, the image's runscript kept) on that image.
cmd_dockerfile_layer() {
    local df=${1:-} name base def out
    dockerfile_paths "$df"
    [ -f "$base" ] || die "$base missing: make image DOCKERFILE=$df builds it"
    # The layer installs with the image's pip (no network, no build isolation) and tests with
    # its torch: say so in one line now rather than after a failed layer build.
    check_apptainer
    export_drop_caps
    if ! apptainer exec "$base" python3 -c 'import setuptools as s, pip, torch; assert int(s.__version__.split(".")[0]) >= 61' >/dev/null 2>&1; then
        die "$base (from $df) lacks what the launcher layer needs: python3 with pip, setuptools >= 61 and torch (add them in the Dockerfile; apptainer exec $base python3 -c 'import pip, setuptools, torch' shows which)"
    fi
    cmd_image "dockerfile-$name" "$out" "$base" "dockerfile:$df" image
}

# mpi_suite BASE: the Debian suite whose Open MPI the local base's image needs so that the
# host's mpirun can start ranks in it (the same series on both sides): empty for the base's
# own (bookworm: 4.1) or another base (docker: its own Open MPI; match the site's yourself).
mpi_suite() {
    local host
    [ "$1" = local ] || return 0
    host=$(dpkg-query -W -f='${Version}' openmpi-bin 2>/dev/null || true)
    case $host in
        5.*) echo trixie ;;
    esac
}

cmd_horovod() {
    local name=${1:?base name} out=${2:-} base start gpu=none
    [ -n "$out" ] || out=$repo/horovod$(image_tag "$name").sif
    if [ "$name" = ngc ]; then
        die "horovod-image on BASE=ngc is not built by the kit (untested): make horovod-image BASE=local, or BASE=cuda"
    fi
    # The CUDA base: NCCL's headers come with its wheel, nvcc from PyPI at build time
    # (requirements/cuda-nvcc.txt). Compiling Horovod under qemu was not tried (hours on 2 cores).
    if [ "$name" = cuda ]; then
        gpu=NCCL
        [ "$ARCH" = "$HOST_ARCH" ] ||
            die "horovod on BASE=cuda builds only for this host's architecture ($HOST_ARCH), not ARCH=$ARCH: compiling it under emulation is not supported; run make horovod-image BASE=cuda on an $ARCH host"
    fi
    if [ "$name" = docker ]; then
        gpu=NCCL
        # Horovod's NCCL operations compile against CUDA: the -runtime images have no nvcc and no
        # NCCL headers, and the build would fail deep inside pip after minutes.
        case ${DOCKER_FROM:-} in
            *-devel*) ;;
            *-runtime*) die "horovod with NCCL on BASE=docker needs a -devel base (nvcc, NCCL headers); DOCKER_FROM=$DOCKER_FROM is a -runtime one: make horovod-image BASE=docker DOCKER_FROM=${DOCKER_FROM/-runtime/-devel}" ;;
            *) die "horovod with NCCL on BASE=docker needs a -devel base (nvcc, NCCL headers); DOCKER_FROM=${DOCKER_FROM:-unset} is not one: pick a pytorch/pytorch:...-devel tag" ;;
        esac
    fi
    preflight
    need_emulation
    lock_or_skip "$out" || return 0
    base=$(base_sif "$name")
    [ -f "$base" ] || die "base image $base missing: make base-image BASE=$name ARCH=$ARCH (make horovod-image builds it)"
    fill_horovod_wheelhouse "$name"
    start=$(now)
    apptainer_build "$out" containers/horovod.def "could not build $out on $base" \
        --build-arg "BASE_SIF=$base" --build-arg "BASE_DESC=$(base_desc "$name")" \
        --build-arg "GIT_COMMIT=$(git_commit)" --build-arg "WHEELHOUSE=$(horovod_wheelhouse "$name")" \
        --build-arg "HOROVOD_VERSION=$HOROVOD_VERSION" --build-arg "GPU_OPERATIONS=$gpu" \
        --build-arg "PY_DEPS=${HOROVOD_DEPS[*]}" --build-arg "MPI_SUITE=$(mpi_suite "$name")" \
        --build-arg "MIRROR=$MIRROR" --build-arg "FILES=$repo/containers/files"
    record "horovod$(image_tag "$name" | tr - _)_build_s" "$(elapsed "$start")"
    start=$(now)
    run_test "$tmp_out" "horovod$(image_tag "$name")"
    record "horovod$(image_tag "$name" | tr - _)_test_s" "$(elapsed "$start")"
    commit_output "$out"
}

cmd_launchers() {
    local base=${1:-$repo/image.sif} out=${2:-$repo/launchers.sif} start
    # The wheelhouse is for bookworm's Python 3.11; NGC's images have their own Python.
    case $(basename "$base") in
        image-ngc*) die "launchers-image on BASE=ngc is not built by the kit (its wheels are for the Debian bases' Python 3.11, not NGC's): pip install -r requirements/launchers.txt in a layer of your own" ;;
    esac
    preflight
    need_emulation
    lock_or_skip "$out" || return 0
    [ -f "$base" ] || die "$base missing: make image first (make launchers-image builds it)"
    fill_launchers_wheelhouse
    start=$(now)
    apptainer_build "$out" containers/launchers.def "could not build $out on $base" \
        --build-arg "BASE_SIF=$base" --build-arg "BASE_DESC=$(basename "$base")" \
        --build-arg "GIT_COMMIT=$(git_commit)" \
        --build-arg "WHEELHOUSE=$build/wheelhouse/launchers$ASFX" \
        --build-arg "PINS=$LAUNCHERS_REQ" --build-arg "CHECK_PINS=$repo/scripts/check-pins.py"
    record launchers_build_s "$(elapsed "$start")"
    start=$(now)
    run_test "$tmp_out" launchers
    record launchers_test_s "$(elapsed "$start")"
    commit_output "$out"
}

# A squashfs whose superblock claims more bytes than the file has is cut short: refused here,
# not at the first `enroot create` on a compute node.
squashfs_whole() {  # squashfs_whole SQSH
    local claimed
    claimed=$(unsquashfs -s "$1" 2>/dev/null | awk '$1 == "Filesystem" && $2 == "size" {print $3; exit}')
    [[ $claimed =~ ^[0-9]+$ ]] || die "$1 is no squashfs (unsquashfs -s $1)"
    [ "$claimed" -le "$(stat -c %s "$1")" ] ||
        die "$1 is cut short: its squashfs says $claimed bytes, the file has $(stat -c %s "$1")"
}

# Enroot accepts the SIF's root filesystem partition (a plain squashfs), but an ordinary
# user's `enroot create` fails (unsquashfs exit 2, "could not create character device ...
# because you're not superuser") on the device nodes a debootstrap base keeps in /dev. Images
# that `enroot import` makes have none (Enroot binds the host's /dev), so they are left out.
drop_devices() {  # drop_devices SQSH: repack without /dev's entries when it has device nodes
    local sqsh=$1 dir
    [ "$(unsquashfs -lls "$sqsh" | grep -c '^[cb]')" -gt 0 ] || return 0
    dir=$(mktemp -d "$(dirname "$sqsh")/.enroot-tree.XXXXXX")
    stage_dir=$dir  # removed on any exit (cleanup): an unpacked CUDA image is about 5 GB
    if ! unsquashfs -q -f -d "$dir/root" "$sqsh" >"$dir/log" 2>&1; then
        die "unsquashfs $sqsh failed: $(grep -v '^$' "$dir/log" | tail -n 1) (df -h $(dirname "$sqsh"): the unpacked tree needs the image's uncompressed size)"
    fi
    find "$dir/root/dev" -mindepth 1 -delete
    rm -f "$sqsh"
    # shellcheck disable=SC2046  # comp_args: words
    mksquashfs "$dir/root" "$sqsh" -quiet -noappend $(comp_args) >/dev/null ||
        die "mksquashfs of $sqsh failed"
    rm -rf "$dir"
    stage_dir=""
}

cmd_enroot() {
    local sif=${1:-$repo/image.sif} out=${2:-$repo/image.sqsh} id start info offset size
    check_apptainer
    mkdir -p "$build"
    [ -f "$sif" ] || die "$sif missing: make image first"
    start=$(now)
    id=$(apptainer sif list "$sif" | awk -F'|' '$5 ~ /FS \(Squashfs\/\*System/ {gsub(/ /, "", $1); print $1; exit}')
    [ -n "$id" ] || die "no squashfs root filesystem partition in $sif (apptainer sif list $sif)"
    tmp_out=$(dirname "$out")/.$(basename "$out").tmp.$$
    # The partition's bytes by its offset and size, not `apptainer sif dump`: apptainer 1.4.5
    # wrote 192 KiB of an lz4 image's partition to stderr as a "WARNING:" line and the rest to
    # stdout, a squashfs that `enroot create` found corrupt (CI run 10).
    info=$(apptainer sif info "$id" "$sif") || die "apptainer sif info $id $sif failed"
    offset=$(awk '$1 == "Offset:" {print $2}' <<<"$info")
    size=$(awk '$1 == "Size:" {print $2}' <<<"$info")
    [[ $offset =~ ^[0-9]+$ && $size =~ ^[0-9]+$ ]] ||
        die "apptainer sif info $id $sif names no offset and size of the root filesystem"
    dd if="$sif" of="$tmp_out" bs=4M iflag=skip_bytes,count_bytes skip="$offset" \
        count="$size" status=none || die "copying the root filesystem out of $sif failed"
    squashfs_whole "$tmp_out"
    drop_devices "$tmp_out"
    commit_output "$out"
    record enroot_dump_s "$(elapsed "$start")"
}

# Any definition file (tests' images, e.g. tests/lab/images/foreign.def) -> OUT, with the
# same options and capability handling as the kit's own images.
cmd_def() {
    local def=${1:-} out=${2:-}
    if [ ! -f "$def" ] || [ -z "$out" ]; then die "usage: build-image.sh def DEF OUT (DEF: $def)"; fi
    check_apptainer
    apptainer_build "$out" "$def" "could not build $out from $def"
    commit_output "$out"
}

case ${1:-} in
    base) cmd_base "${@:2}" ;;
    def) cmd_def "${@:2}" ;;
    image) cmd_image "${@:2}" ;;
    horovod) cmd_horovod "${@:2}" ;;
    launchers) cmd_launchers "${@:2}" ;;
    dockerfile) cmd_dockerfile_base "${@:2}" && cmd_dockerfile_layer "${@:2}" ;;
    dockerfile-base) cmd_dockerfile_base "${@:2}" ;;
    dockerfile-layer) cmd_dockerfile_layer "${@:2}" ;;
    dockerfile-name) dockerfile_name "${2:?Dockerfile path}"; echo ;;
    enroot) cmd_enroot "${@:2}" ;;
    commit) git_commit ;;
    paths) cmd_paths "${@:2}" ;;
    prepare) cmd_prepare "${@:2}" ;;
    *) die "usage: build-image.sh base|image|horovod NAME [OUT] | launchers [SIF [OUT]] | dockerfile[-base|-layer] PATH | dockerfile-name PATH | enroot [SIF [SQSH]] | def DEF OUT | commit | paths NAME | prepare cuda" ;;
esac
