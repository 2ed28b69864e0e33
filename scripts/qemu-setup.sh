#!/usr/bin/env bash
# Run foreign-architecture binaries here through qemu-user-static and binfmt_misc (for
# `make image ARCH=arm64` on an x86_64 host, or ARCH=amd64 on an aarch64 one). Idempotent, root.
#
#   bash scripts/qemu-setup.sh ARCH     ARCH: arm64 | amd64 (Debian names)
#
# Installs Debian's qemu-user-static and binfmt-support when missing, mounts binfmt_misc when
# no init system did (these VMs have no systemd), registers the interpreter and checks that it
# is registered with the F flag: the kernel then opens the interpreter at registration, so it
# also runs binaries inside containers, whose root filesystem has no /usr/libexec/qemu-binfmt.
# Registration: trixie's qemu (10.x) ships only systemd's binfmt.d line
# (/usr/lib/binfmt.d/qemu-aarch64.conf), which nothing applies without systemd and which
# update-binfmts does not know ("not in database"): its line is written to
# /proc/sys/fs/binfmt_misc/register, as systemd-binfmt would. Older packages (binfmt-support's
# /usr/share/binfmts/) are enabled with update-binfmts.
# Every failure is one line on stderr saying what to do.
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

qemu_version() {  # the installed qemu-user's version (8.1), or nothing; never fails (set -e)
    local bin
    for bin in "/usr/bin/$qemu-static" "/usr/bin/$qemu"; do
        if [ -x "$bin" ]; then
            "$bin" --version 2>/dev/null | sed -n '1s/.*version \([0-9]*\.[0-9]*\).*/\1/p'
            return 0
        fi
    done
    return 0
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

# systemd's binfmt.d file for $qemu (/etc overrides /run overrides /usr/lib), or nothing.
binfmt_d_file() {
    local dir
    for dir in /etc/binfmt.d /run/binfmt.d /usr/lib/binfmt.d; do
        if [ -r "$dir/$qemu.conf" ]; then echo "$dir/$qemu.conf"; return 0; fi
    done
}

unregister() {  # with flag F the kernel keeps the interpreter it opened: drop the old entry
    if [ -e "$entry" ]; then
        echo -1 >"$entry" 2>/dev/null || die "cannot unregister the old $qemu entry ($entry): echo -1 >$entry, then rerun"
    fi
}

registered_with_f && new_enough "$(qemu_version)" && exit 0
[ "$(id -u)" = 0 ] || die "$qemu is not registered in $binfmt with flags F (or qemu is older than $MIN_QEMU); as root: bash scripts/qemu-setup.sh $arch"

if [ ! -e "$binfmt/register" ]; then
    mount -t binfmt_misc binfmt_misc "$binfmt" 2>/dev/null ||
        die "cannot mount binfmt_misc on $binfmt (modprobe binfmt_misc; in a container the host must provide it)"
fi
have=$(qemu_version)
if ! new_enough "$have"; then
    suite=$(qemu_suite)
    [ -n "$suite" ] || die "qemu-user-static >= $MIN_QEMU needed (${have:-none} installed; $MIN_QEMU+ emulates /proc/cpuinfo, without it importing torch crashes): add a Debian suite that has it (trixie, or bookworm-backports) to apt's sources, pinned low, then rerun"
    echo "qemu-setup: installing qemu-user-static binfmt-support from $suite (apt; ${have:-no qemu} here)"
    log=$(mktemp /tmp/qemu-setup-apt.XXXXXX.log)
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            -t "$suite" qemu-user-static binfmt-support >"$log" 2>&1; then
        die "apt-get install -t $suite qemu-user-static binfmt-support failed: $(grep -E '^E:' "$log" | tail -n 1) (log: $log): run apt-get update, then retry"
    fi
    rm -f "$log"
    have=$(qemu_version)
    new_enough "$have" || die "qemu from $suite is ${have:-not on /usr/bin}, older than $MIN_QEMU: install qemu-user-static >= $MIN_QEMU by hand, then rerun"
    # A package postinst may have registered the new binary already; re-register anyway, or
    # an entry opened before the upgrade keeps running the old one.
    unregister
fi
if registered_with_f; then
    echo "qemu-setup: $qemu registered ($(sed -n 's/^flags: //p' "$entry"), qemu $have)"
    exit 0
fi
# Registered without F (binfmt-support's default for some packages), or not at all.
unregister
conf=$(binfmt_d_file)
if [ -n "$conf" ]; then
    # As systemd-binfmt: the first line that is not a comment (# or ;); the kernel parses the
    # \x escapes itself.
    line=$(grep -v '^[[:space:]]*[#;]' "$conf" | grep -m1 . || true)
    [ -n "$line" ] || die "$conf has no registration line: apt-get install --reinstall qemu-user-binfmt, then rerun"
    if ! err=$(printf '%s\n' "$line" 2>&1 >"$binfmt/register"); then
        die "writing $conf's line to $binfmt/register failed (${err##*: }): check the interpreter it names exists ($(echo "$line" | cut -d"${line:0:1}" -f7))"
    fi
    how="from $conf"
elif command -v update-binfmts >/dev/null; then
    update-binfmts --enable "$qemu" >/dev/null 2>&1 ||
        die "update-binfmts --enable $qemu failed and no binfmt.d file names $qemu: apt-get install --reinstall qemu-user-binfmt, then rerun"
    how="by update-binfmts"
else
    die "no registration for $qemu: neither /usr/lib/binfmt.d/$qemu.conf (systemd's, qemu >= 9) nor update-binfmts (binfmt-support): apt-get install qemu-user-static binfmt-support, then rerun"
fi
registered_with_f ||
    die "$qemu was registered $how but without flag F (flags: $(sed -n 's/^flags: //p' "$entry")): containers cannot reach the interpreter; Debian's qemu-user-binfmt registers with F"
echo "qemu-setup: $qemu registered $how ($(sed -n 's/^flags: //p' "$entry"), qemu $have)"
