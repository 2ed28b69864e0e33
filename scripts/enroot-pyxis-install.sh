#!/usr/bin/env bash
# Enroot and pyxis for the lab: the pinned upstream releases, or a local folder of builds.
# Called by scripts/enroot-setup.sh (so by `make setup`); idempotent.
#
#   bash scripts/enroot-pyxis-install.sh [--root DIR]
#
# Where they come from, the first that applies:
#   1. ENROOT_PYXIS_TOOLS=DIR (told to): that folder's install.sh; nothing is downloaded.
#   2. The releases pinned in scripts/enroot-pyxis.pins (ENROOT_PYXIS_PINS=FILE for another):
#      the source tarballs of Enroot's tag, of the makeself its deps/makeself submodule names,
#      and of pyxis' tag, each verified against its pin's git tree id (scripts/fetch-pinned.py).
#      Both are built here before anything is installed: Enroot with `make FORCE_GLIBC=1`
#      (helpers linked against this machine's glibc; kernel headers from Debian's
#      linux-libc-dev instead of the deps/linux-headers submodule; no musl), then checked by
#      running the built `enroot version`; pyxis against the installed Slurm's headers.
#      Build needs: make, gcc (cc), libc6-dev (scripts/setup.sh installs them).
#   3. When 2 cannot be used (upstream unreachable, or an artifact has no verified pin): the
#      local folder ENROOT_PYXIS_LOCAL (enroot-setup.sh: ../shared/tools/enroot-pyxis beside
#      the checkout) if it has install.sh; else one line saying what is missing, exit 3.
# A checksum mismatch, an HTTP error or a failed build: one line, exit 1, nothing installed.
#
# What 2 changes under ROOT (default /; --root DIR installs there instead, DESTDIR-style, for
# tests: no root needed, no apt-get, and a local folder is named but not run, since its
# install.sh installs into / only):
#   - Enroot's `make install` (prefix /usr, sysconfdir /etc): ROOT/usr/bin/enroot*,
#     ROOT/usr/lib/enroot, ROOT/usr/share/enroot, ROOT/etc/enroot (what upstream's enroot .deb
#     holds; not enroot+caps' setcap, which the lab does not use). Into /: also `apt-get install`
#     of Enroot's run-time packages (enroot_runtime below) that are missing;
#   - ROOT/usr/local/lib/slurm/spank_pyxis.so, ROOT/usr/local/share/pyxis/pyxis.conf (pyxis'
#     `make install`), ROOT/etc/slurm/plugstack.conf.d/pyxis.conf and an include line in
#     ROOT/etc/slurm/plugstack.conf (slurmd and srun load it at start: restart the cluster);
#   - ROOT/var/lib/torchrun-jsc-kit/enroot-pyxis: what was installed, so a rerun downloads nothing.
# Slurm's headers (slurm/spank.h): SLURM_INCLUDE=DIR if set; else those of the installed
# libslurm-dev when its version is slurm-client's; else libslurm-dev of slurm-client's exact
# version is fetched with `apt-get download` and unpacked into a temp dir (no package is
# installed). ENROOT_PYXIS_TIMEOUT: seconds for connecting and for each read (default 20).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
pins=${ENROOT_PYXIS_PINS:-$here/scripts/enroot-pyxis.pins}
timeout=${ENROOT_PYXIS_TIMEOUT:-20}
local_dir=${ENROOT_PYXIS_LOCAL:-}
root=/
# What Enroot runs (upstream's .deb Depends and Recommends, and the squashfuse/fuse-overlayfs it
# suggests), the list the local folder's install.sh installs; plus curl (enroot import).
enroot_runtime=(jq squashfs-tools parallel pigz zstd fuse-overlayfs squashfuse libcap2-bin curl)

die() { echo "enroot-pyxis: $1" >&2; exit "${2:-1}"; }

while [ "$#" -gt 0 ]; do
    case $1 in
        --root) if [ "$#" -lt 2 ] || [ -z "$2" ]; then die "--root needs a directory" 2; fi
                root=$2; shift 2 ;;
        *) die "unknown option '$1': usage: enroot-pyxis-install.sh [--root DIR]" 2 ;;
    esac
done
case $root in
    /) [ "$(id -u)" = 0 ] || die "must run as root to install into / (--root DIR installs elsewhere)" ;;
    /*) [ -d "$root" ] || die "--root '$root': no such directory" 2 ;;
    *) die "--root '$root': expected an absolute path" 2 ;;
esac
root=${root%/}

# install_local DIR REASON: the lab's builds, via that folder's own installer.
install_local() {
    echo "enroot-pyxis: $2: using the local folder $1"
    if [ -n "$root" ]; then
        echo "enroot-pyxis: --root $root: the local folder's install.sh installs into / only: not run"
        return 0
    fi
    bash "$1/install.sh"
}

if [ -n "${ENROOT_PYXIS_TOOLS:-}" ]; then
    [ -f "$ENROOT_PYXIS_TOOLS/install.sh" ] ||
        die "ENROOT_PYXIS_TOOLS='$ENROOT_PYXIS_TOOLS': no install.sh there (a folder of the lab's Enroot/pyxis builds)" 2
    install_local "$ENROOT_PYXIS_TOOLS" "ENROOT_PYXIS_TOOLS is set"
    exit 0
fi

fetch() { python3 "$here/scripts/fetch-pinned.py" --pins "$pins" "$@"; }
arch=$(dpkg --print-architecture)
enroot_version=$(fetch --version "enroot:src") || exit 1
makeself_version=$(fetch --version "makeself:src") || exit 1
pyxis_version=$(fetch --version "pyxis:src") || exit 1
slurm_full=$(dpkg-query -W -f='${Version}' slurm-client 2>/dev/null || true)
stamp=$root/var/lib/torchrun-jsc-kit/enroot-pyxis
want="enroot $enroot_version (makeself $makeself_version, $arch) pyxis $pyxis_version slurm ${SLURM_INCLUDE:-${slurm_full:-none}} from $pins"
if [ "$(cat "$stamp" 2>/dev/null || true)" = "$want" ]; then
    echo "enroot-pyxis: already installed: $want"
    exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
log=$work/log
rc=0
fetch --timeout "$timeout" "$work/dl" "enroot:src" "makeself:src" "pyxis:src" \
    >"$work/files" 2>"$work/why" || rc=$?
why=$(sed 's/^fetch-pinned: //' "$work/why")
case $rc in
    0) ;;
    3|4)  # the pinned releases cannot be used: the local folder, else one line
        if [ -n "$local_dir" ] && [ -f "$local_dir/install.sh" ]; then
            install_local "$local_dir" "$why"
            exit 0
        fi
        die "Enroot and pyxis not installed: $why; no local folder${local_dir:+ at $local_dir} either: reach github.com (NVIDIA/enroot, megastep/makeself, NVIDIA/pyxis: the tags pinned in ${pins#"$here/"}) or set ENROOT_PYXIS_TOOLS=DIR to a folder of builds with install.sh" 3 ;;
    *) echo "enroot-pyxis: $why" >&2; exit "$rc" ;;  # mismatch or HTTP error: nothing installed
esac
mapfile -t files <"$work/files"
enroot_tgz=${files[0]} makeself_tgz=${files[1]} pyxis_tgz=${files[2]}
stage=$work/stage
mkdir -p "$stage"

# --- Enroot: built before anything is installed ------------------------------------------------
# Its `deps` step (deps/Makefile) installs deps/makeself/makeself.sh as enroot-makeself and builds
# the in-tree libbsd parts; the linux-headers stamp tells it the kernel headers are there
# (linux-libc-dev's, found by the compiler itself); FORCE_GLIBC skips musl. Its
# `git submodule update` finds no repository (GIT_CEILING_DIRECTORIES) and is ignored by its
# Makefile. `make` first, then `make install DESTDIR=`: the enroot script holds sysconfdir and
# libdir as built, so they must not include DESTDIR.
src=$work/enroot
mkdir -p "$src"
tar -xzf "$enroot_tgz" -C "$src" --strip-components=1 --no-same-owner
mkdir -p "$src/deps/makeself" "$src/deps/linux-headers"
tar -xzf "$makeself_tgz" -C "$src/deps/makeself" --strip-components=1 --no-same-owner
touch "$src/deps/linux-headers/.stamp"
enroot_make=(make FORCE_GLIBC=1 prefix=/usr sysconfdir=/etc)
if ! (cd "$src" && export GIT_CEILING_DIRECTORIES=$work &&
      "${enroot_make[@]}" && "${enroot_make[@]}" install DESTDIR="$stage") >>"$log" 2>&1; then
    tail -n 5 "$log" >&2
    die "Enroot $enroot_version: build failed (needs make, gcc, libc6-dev): nothing installed"
fi
built=$(ENROOT_LIBRARY_PATH=$stage/usr/lib/enroot ENROOT_SYSCONF_PATH=$stage/etc/enroot \
        PATH=$stage/usr/bin:$PATH "$stage/usr/bin/enroot" version 2>>"$log" || true)
[ "$built" = "$enroot_version" ] ||
    die "Enroot $enroot_version: the built enroot says version '$built': nothing installed"

# --- pyxis: built before anything is installed, against the Slurm that will load it --------
inc=
if [ -n "${SLURM_INCLUDE:-}" ]; then
    [ -f "$SLURM_INCLUDE/slurm/spank.h" ] || die "SLURM_INCLUDE='$SLURM_INCLUDE': no slurm/spank.h there" 2
    inc=$SLURM_INCLUDE
elif [ -n "$slurm_full" ]; then
    dev=$(dpkg-query -W -f='${Status} ${Version}' libslurm-dev 2>/dev/null || true)
    if [ "$dev" = "install ok installed $slurm_full" ] && [ -f /usr/include/slurm/spank.h ]; then
        inc=/usr/include
    else
        mkdir -p "$work/deb"
        (cd "$work/deb" && apt-get download "libslurm-dev=$slurm_full") >>"$log" 2>&1 ||
            die "pyxis: cannot get Slurm's headers (apt-get download libslurm-dev=$slurm_full failed; install libslurm-dev=$slurm_full or set SLURM_INCLUDE=DIR)"
        dpkg-deb -x "$work"/deb/libslurm-dev_*.deb "$work/slurm-dev"
        inc=$work/slurm-dev/usr/include
    fi
fi
mkdir -p "$work/pyxis"
if [ -n "$inc" ]; then
    tar -xzf "$pyxis_tgz" -C "$work/pyxis" --strip-components=1 --no-same-owner
    # CPPFLAGS from the environment: pyxis' Makefile appends it to its own flags (on the make
    # command line it would replace them).
    if ! (cd "$work/pyxis" && CPPFLAGS="-I$inc" make && make install DESTDIR="$stage" prefix=/usr/local) >>"$log" 2>&1; then
        tail -n 5 "$log" >&2
        die "pyxis $pyxis_version: build against $inc failed: nothing installed"
    fi
else
    echo "enroot-pyxis: no Slurm installed (slurm-client): pyxis not built (install Slurm first, or SLURM_INCLUDE=DIR)"
fi

# --- install: everything above is verified and built ------------------------------------------
if [ -z "$root" ]; then
    missing=()
    for p in "${enroot_runtime[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
    if [ "${#missing[@]}" -gt 0 ]; then
        apt_install() {
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=600 \
                --no-install-recommends "${missing[@]}" >>"$log" 2>&1
        }
        apt_install || { apt-get update -qq >>"$log" 2>&1 && apt_install; } ||
            { tail -n 5 "$log" >&2; die "apt-get install of Enroot's run-time packages (${missing[*]}) failed: nothing installed"; }
    fi
fi
cp -a "$stage/." "$root/"
if [ -f "$stage/usr/local/lib/slurm/spank_pyxis.so" ]; then
    mkdir -p "$root/etc/slurm/plugstack.conf.d"
    echo "required /usr/local/lib/slurm/spank_pyxis.so" >"$root/etc/slurm/plugstack.conf.d/pyxis.conf"
    grep -qs 'plugstack.conf.d/\*' "$root/etc/slurm/plugstack.conf" ||
        echo "include /etc/slurm/plugstack.conf.d/*.conf" >>"$root/etc/slurm/plugstack.conf"
fi
mkdir -p "$(dirname "$stamp")"
echo "$want" >"$stamp"
echo "enroot-pyxis: installed from the pinned releases into ${root:-/}: $want"
