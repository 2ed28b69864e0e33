#!/usr/bin/env bash
# Run foreign-architecture binaries here through qemu-user-static and binfmt_misc (for
# `make image ARCH=arm64` on an x86_64 host, or ARCH=amd64 on an aarch64 one). Idempotent, root.
#
#   bash scripts/qemu-setup.sh ARCH     ARCH: arm64 | amd64 (Debian names)
#
# Installs Debian's qemu-user-static and binfmt-support when missing, mounts binfmt_misc when
# no init system did (these VMs have no systemd), enables the interpreter and checks that it
# is registered with the F flag: the kernel then opens the interpreter at registration, so it
# also runs binaries inside containers, whose root filesystem has no /usr/libexec/qemu-binfmt.
# Every failure ends in one line saying what to do.
set -euo pipefail

die() { echo "qemu-setup: $*" >&2; exit 1; }

arch=${1:-}
case $arch in
    arm64) qemu="qemu-aarch64" ;;
    amd64) qemu="qemu-x86_64" ;;
    *) die "usage: qemu-setup.sh arm64|amd64 (got '${arch}')" ;;
esac
binfmt=/proc/sys/fs/binfmt_misc
entry=$binfmt/$qemu

registered_with_f() {
    [ -r "$entry" ] && grep -qx enabled "$entry" && grep -q '^flags: .*F' "$entry"
}


# QEMU >= 8.1 emulates /proc/cpuinfo for arm/aarch64 programs; 7.2 (bookworm's) passes the
# host's x86 one through, and torch's cpuinfo crashes importing torch (segfault, measured here).
MIN_QEMU=8.1

qemu_version() {  # the installed qemu-user's version (8.1), or nothing
    local bin
    for bin in "/usr/bin/$qemu-static" "/usr/bin/$qemu"; do
        [ -x "$bin" ] && { "$bin" --version | sed -n '1s/.*version \([0-9]*\.[0-9]*\).*/\1/p'; return; }
    done
}

new_enough() {  # new_enough VERSION: VERSION >= MIN_QEMU
    [ -n "$1" ] && [ "$(printf '%s\n' "$MIN_QEMU" "$1" | sort -V | head -n1)" = "$MIN_QEMU" ]
}

# The first suite apt knows whose qemu-user-static is new enough (bookworm's is not; trixie's
# 10.0 is: scripts/setup.sh adds trixie pinned low).
qemu_suite() {
    apt-cache madison qemu-user-static 2>/dev/null | while IFS='|' read -r _ version source; do
        version=$(echo "$version" | sed 's/^ *[0-9]*://; s/[+~-].*//; s/ //g')
        if new_enough "$(echo "$version" | cut -d. -f1,2)"; then
            echo "$source" | awk '{print $2}' | cut -d/ -f1
            return
        fi
    done
}

registered_with_f && new_enough "$(qemu_version)" && exit 0
[ "$(id -u)" = 0 ] || die "$qemu is not registered in $binfmt with flags F (or qemu is older than $MIN_QEMU); as root: bash scripts/qemu-setup.sh $arch"

have=$(qemu_version)
if ! new_enough "$have" || ! command -v update-binfmts >/dev/null; then
    suite=$(qemu_suite)
    [ -n "$suite" ] || die "qemu-user-static >= $MIN_QEMU needed (${have:-none} installed; $MIN_QEMU+ emulates /proc/cpuinfo, without it importing torch crashes): add a Debian suite that has it (trixie, or bookworm-backports) to apt's sources, pinned low, then rerun"
    echo "qemu-setup: installing qemu-user-static binfmt-support from $suite (apt; ${have:-no qemu} here)"
    log=$(mktemp /tmp/qemu-setup-apt.XXXXXX.log)
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            -t "$suite" qemu-user-static binfmt-support >"$log" 2>&1; then
        tail -n 3 "$log" >&2
        die "apt-get install -t $suite qemu-user-static binfmt-support failed (log: $log): run apt-get update, then retry"
    fi
    # With flag F the kernel holds the interpreter it opened at registration: re-register,
    # or the replaced binary keeps running.
    if [ -e "$entry" ]; then update-binfmts --disable "$qemu" >/dev/null 2>&1 || true; fi
fi
if [ ! -e "$binfmt/register" ]; then
    mount -t binfmt_misc binfmt_misc "$binfmt" 2>/dev/null ||
        die "cannot mount binfmt_misc on $binfmt (modprobe binfmt_misc; in a container the host must provide it)"
fi
update-binfmts --enable "$qemu" >/dev/null 2>&1 || true
registered_with_f ||
    die "$qemu is not registered with flags F in $binfmt after update-binfmts --enable $qemu (see: cat $entry; Debian's qemu-user-static registers 'fix_binary yes')"
echo "qemu-setup: $qemu registered ($(sed -n 's/^flags: //p' "$entry"))"
