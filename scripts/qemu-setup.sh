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

registered_with_f && exit 0
[ "$(id -u)" = 0 ] || die "$qemu is not registered in $binfmt with flags F; as root: bash scripts/qemu-setup.sh $arch"

installed() {
    [ "$(dpkg-query -W -f='${Status}\n' qemu-user-static binfmt-support 2>/dev/null |
         grep -c 'install ok installed')" = 2 ]
}
if ! installed; then
    echo "qemu-setup: installing qemu-user-static binfmt-support (apt)"
    log=$(mktemp /tmp/qemu-setup-apt.XXXXXX.log)
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            qemu-user-static binfmt-support >"$log" 2>&1; then
        tail -n 3 "$log" >&2
        die "apt-get install qemu-user-static binfmt-support failed (log: $log): run apt-get update, then retry"
    fi
fi
if [ ! -e "$binfmt/register" ]; then
    mount -t binfmt_misc binfmt_misc "$binfmt" 2>/dev/null ||
        die "cannot mount binfmt_misc on $binfmt (modprobe binfmt_misc; in a container the host must provide it)"
fi
update-binfmts --enable "$qemu" >/dev/null 2>&1 || true
registered_with_f ||
    die "$qemu is not registered with flags F in $binfmt after update-binfmts --enable $qemu (see: cat $entry; Debian's qemu-user-static registers 'fix_binary yes')"
echo "qemu-setup: $qemu registered ($(sed -n 's/^flags: //p' "$entry"))"
