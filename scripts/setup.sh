#!/usr/bin/env bash
# Install what the local cluster, the image builds and the tests need. Idempotent; root only.
# Debian bookworm host. Apptainer comes from Debian sid and needs trixie's glibc
# (see ../shared/machine.md); trixie and sid are pinned low so nothing else moves.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
venv=${VENV:-$here/.venv}

if [ "$(id -u)" != 0 ]; then
    echo "setup.sh: must run as root (apt-get, /etc/apptainer); rerun with sudo" >&2
    exit 1
fi

apt_packages=(slurm-wlm munge squashfs-tools debootstrap openmpi-bin libopenmpi-dev
              libpmix-dev shellcheck iproute2 util-linux procps psmisc cmake g++ make libcap2-bin)

add_trixie_sid() {
    local src=/etc/apt/sources.list.d/torchrun-jsc-trixie-sid.sources
    local pref=/etc/apt/preferences.d/torchrun-jsc-trixie-sid
    [ -f "$src" ] && [ -f "$pref" ] && return 0
    cat >"$src" <<'SRC'
Types: deb
URIs: http://deb.debian.org/debian
Suites: trixie sid
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
    cat >"$pref" <<'PREF'
Package: *
Pin: release n=trixie
Pin-Priority: 100

Package: *
Pin: release n=sid
Pin-Priority: 50
PREF
    rm -f /var/lib/apt/torchrun-jsc-updated
}

apt_update_once() {
    [ -f /var/lib/apt/torchrun-jsc-updated ] && return 0
    apt-get update -qq
    touch /var/lib/apt/torchrun-jsc-updated
}

missing=()
for p in "${apt_packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ! command -v apptainer >/dev/null; then missing+=(apptainer); fi

if [ "${#missing[@]}" -gt 0 ]; then
    add_trixie_sid
    apt_update_once
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq -o DPkg::Lock::Timeout=600 --no-install-recommends "${apt_packages[@]}"
    if ! command -v apptainer >/dev/null; then
        apt-get install -y -qq -o DPkg::Lock::Timeout=600 --no-install-recommends -t trixie \
            libc6 libc-bin libc6-dev libc-dev-bin base-files dpkg-dev libdpkg-perl
        apt-get install -y -qq -o DPkg::Lock::Timeout=600 --no-install-recommends apptainer/sid
    fi
fi

"$here/scripts/apptainer-config.sh"

if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import torch, yaml, pytest' 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --upgrade pip
    "$venv/bin/pip" install -q 'torch==2.13.0' 'pyyaml>=6' 'pytest>=7' 'spython>=0.3' numpy
fi
"$venv/bin/pip" install -q --no-deps -e "$here"
echo "setup: ok (venv $venv, $(apptainer --version), $(sinfo --version))"
