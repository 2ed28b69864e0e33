#!/usr/bin/env bash
# Run a command as on a machine where the kit never ran before (what CI runs: .ci/run).
#
#   sudo bash scripts/fresh-machine.sh make test
#
# CI runs on the machine of the session that submitted, so whatever earlier runs left there
# (a slurm.conf, a running lab, Enroot containers, Apptainer's cache, state under /run) can hide
# a missing set-up step: both README commands once failed on a new machine while CI was green.
# This runs CMD in a private mount namespace in which those places are empty:
#   /etc/slurm                  only the files Debian's Slurm packages ship (no slurm.conf,
#                               gres.conf, mpi.conf, no pyxis include: `make setup` writes it)
#   /run/torchrun-jsc-cluster   the lab's state (PIDs, per-node hosts files, node /tmp dirs)
#   /run/netns, /run/enroot     network namespaces and Enroot's runtime state
#   /tmp                        unless the checkout itself lies under /tmp (then said so)
#   /root/.apptainer, /root/.cache/enroot, /root/.local/share/enroot   caches, containers
#   the lab user's home         (jwbuser, scripts/cluster.sh)
# The empty directories lie on disk under /var/tmp and are removed afterwards. What apt installed
# stays (a namespace cannot uninstall packages): `make setup` finds it installed, as on a
# machine where only the packages are left; its install path is tested with --plan and SETUP_ROOT
# (tests/fakes/test_setup.py). pip's download cache stays (speed only).
# A lab left running by an earlier run (also one started inside an earlier run's namespace) is
# stopped first, and the lab this run starts is stopped at the end, whatever CMD returned.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
prog=fresh-machine
lab_user=jwbuser

die() { echo "$prog: $*" >&2; exit 2; }
[ $# -ge 1 ] || die "usage: fresh-machine.sh CMD [ARGS...]"
[ "$(id -u)" = 0 ] || die "must run as root (it makes a mount namespace and starts the lab)"

stop_lab() {  # the lab's own `down`, then anything of a lab whose state this namespace cannot see
    if command -v slurmctld >/dev/null; then bash "$here/scripts/cluster.sh" down >/dev/null 2>&1 || true; fi
    local p
    for p in slurmctld slurmd slurmstepd slurmdbd; do pkill -x "$p" 2>/dev/null || true; done
    # The lab's own MariaDB (scripts/cluster.sh: its data under the lab's state, its port):
    # left by a run that was killed, it holds the port and the next lab's does not come up.
    pkill -f -- "mariadbd .*--datadir=/run/torchrun-jsc-cluster/mysql/" 2>/dev/null || true
    for p in slurmctld slurmd slurmstepd slurmdbd; do
        local n=0
        while pgrep -x "$p" >/dev/null && [ "$n" -lt 100 ]; do n=$((n + 1)); sleep 0.1; done
        pkill -9 -x "$p" 2>/dev/null || true
    done
    # Host-side veth ends (fabric p, management m) of a lab whose namespace files are gone.
    local link
    for link in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' | grep -E '^jwb([0-9]+|[jcf][0-9]+)(p[0-9]?|m)$' || true); do
        ip link del "$link" 2>/dev/null || true
    done
}

if [ -z "${FRESH_MACHINE_SCRATCH:-}" ]; then
    stop_lab
    scratch=$(mktemp -d /var/tmp/fresh-machine.XXXXXX)
    echo "$prog: running '$*' with no lab state, no Slurm config, empty caches (scratch $scratch)"
    # Free space, before and at the end: a full disk fails tests far from its cause (images,
    # node-local /tmp dirs and venvs all land on this disk).
    echo "$prog: free on $(df -h --output=target,avail /var/tmp | tail -1 | tr -s ' ') before"
    rc=0
    FRESH_MACHINE_SCRATCH=$scratch unshare --mount --propagation private -- bash "$0" "$@" || rc=$?
    echo "$prog: free on $(df -h --output=target,avail /var/tmp | tail -1 | tr -s ' ') at the end" \
        "(scratch $(du -sh --one-file-system "$scratch" 2>/dev/null | cut -f1))"
    stop_lab
    rm -rf --one-file-system "$scratch"
    exit "$rc"
fi

# --- Inside the private mount namespace --------------------------------------------------
scratch=$FRESH_MACHINE_SCRATCH
mask() {  # mask DIR [MODE [OWNER]]: an empty directory over DIR (created when missing)
    local dir=$1 mode=${2:-0755} owner=${3:-root} empty
    empty=$scratch/masks$dir
    mkdir -p "$empty" "$dir"
    chmod "$mode" "$empty"
    chown "$owner" "$empty"
    mount --bind "$empty" "$dir"
}

# /etc/slurm as Debian's packages leave it.
mkdir -p "$scratch/etc-slurm"
for f in $(dpkg-query -L slurm-client slurmd slurmctld slurm-wlm-basic-plugins 2>/dev/null | grep '^/etc/slurm/' | sort -u); do
    [ -f "$f" ] && install -D -m 0644 "$f" "$scratch/etc-slurm/${f#/etc/slurm/}"
done
if [ -d /etc/slurm ]; then mount --bind "$scratch/etc-slurm" /etc/slurm; fi

mask /run/torchrun-jsc-cluster
mask /run/netns
mask /run/enroot
case "$here/" in
    /tmp/*) echo "$prog: the checkout is under /tmp: /tmp is not masked" ;;
    *) mask /tmp 1777 ;;
esac
mask /root/.apptainer 0700
mask /root/.cache/enroot 0700
mask /root/.local/share/enroot 0700
if home=$(getent passwd "$lab_user" | cut -d: -f6) && [ -n "$home" ]; then
    mask "$home" 0755 "$lab_user"
fi

# The lab this command starts lives in this namespace: stop it here, where its state is.
trap 'bash "$here/scripts/cluster.sh" down >/dev/null 2>&1 || true' EXIT
"$@"
