#!/usr/bin/env bash
# Real Enroot and pyxis for the local cluster (the lab only; the kit itself never needs this).
# Idempotent; root only. Called by `make setup` (so by `make test` and `make demo`).
#
# Neither is packaged for Debian or on PyPI. scripts/enroot-pyxis-install.sh installs the
# releases pinned in scripts/enroot-pyxis.pins (source tarballs of their tags, verified by git
# tree id and built here: Enroot with FORCE_GLIBC, pyxis against the installed Slurm's
# headers) and uses a local folder of builds only when told to (ENROOT_PYXIS_TOOLS=DIR)
# or when the pinned releases cannot be used (upstream unreachable, or no verified checksum):
# then ../shared/tools/enroot-pyxis beside the checkout. With neither, it says so in one line
# and this changes nothing; the Enroot ring-3 tests then fail saying what is missing.
#
# What it changes:
#   - scripts/enroot-pyxis-install.sh (its header lists what it changes) or the local folder's
#     install.sh: /usr/bin/enroot*, /usr/lib/enroot, /etc/enroot, the pyxis plugin in
#     /usr/local/lib/slurm and /etc/slurm/plugstack.conf.d/pyxis.conf (slurmd and srun load it
#     at start: a running lab is restarted below when pyxis is new);
#   - /etc/enroot/enroot.conf.d/90-torchrun-jsc-lab.conf: every node's Enroot paths under its
#     own /tmp, per user, as a site's enroot.conf sets them. pyxis removes ENROOT_DATA_PATH &
#     co. from the job's environment before it runs enroot, and the enroot runtime exports
#     none unless the spec sets runtime.data_path (the data path is the site's), so only
#     Enroot's config gives the nodes separate paths (the nodes share every other directory of
#     this machine; two nodes unpacking into one directory fail with "create_inode: ... File
#     exists"; Enroot's default, ~/.local/share/enroot, is such a shared directory here);
#   - /etc/enroot/hooks.d/50-slurm-pmi.sh: Enroot's own PMI hook from /usr/share/enroot, as
#     PMIx sites enable it (Horovod under pyxis with srun --mpi=pmix needs it);
#   - /usr/local/bin/nvidia-container-cli, only when none is installed: the lab's nodes have
#     fake GPUs (scripts/cluster.sh), and Enroot's nvidia hook runs this tool whenever a task
#     was given GPUs. The stand-in says which devices the hook asked for and maps nothing.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
conf=/etc/enroot/enroot.conf.d/90-torchrun-jsc-lab.conf
stub=/usr/local/bin/nvidia-container-cli

[ "$(id -u)" = 0 ] || { echo "enroot-setup: must run as root" >&2; exit 1; }
had_pyxis=0
[ -f /usr/local/lib/slurm/spank_pyxis.so ] && had_pyxis=1
rc=0
ENROOT_PYXIS_LOCAL=${ENROOT_PYXIS_LOCAL:-$here/../shared/tools/enroot-pyxis} \
    bash "$here/scripts/enroot-pyxis-install.sh" || rc=$?
case $rc in
    0) ;;
    3) exit 0 ;;  # neither the pinned releases nor a local folder: said in one line, nothing changed
    *) exit "$rc" ;;
esac

mkdir -p "$(dirname "$conf")"
cat >"$conf.tmp" <<'CONF'
# torchrun-jsc-kit lab (scripts/enroot-setup.sh): each node has its own /tmp; per user.
ENROOT_DATA_PATH    /tmp/enroot-${UID}/data
ENROOT_RUNTIME_PATH /tmp/enroot-${UID}/run
ENROOT_CACHE_PATH   /tmp/enroot-${UID}/cache
CONF
mv -f "$conf.tmp" "$conf"

# Enroot's PMI hook, which Enroot ships as an extra and PMIx sites enable (pyxis + srun
# --mpi=pmix: the step's PMIx variables and server directories reach the container).
# The lab's nodes are several slurmd on one machine, so SlurmdSpoolDir holds '%n', which
# the hook reads unexpanded from `scontrol show config`: the lab's copy expands it (a real
# node's single slurmd has a plain path and takes the hook unchanged).
pmi_hook=/usr/share/enroot/hooks.d/50-slurm-pmi.sh
if [ -f "$pmi_hook" ]; then
    # shellcheck disable=SC2016  # the ${...} is the hook's own shell text, inserted as written
    sed 's|^\(\s*\)if \[ -z "${slurm_spool}" \]|\1slurm_spool=${slurm_spool//%n/${SLURMD_NODENAME-}}  # lab: several slurmd per machine\n&|' \
        "$pmi_hook" >/etc/enroot/hooks.d/50-slurm-pmi.sh.tmp
    grep -q "lab: several slurmd" /etc/enroot/hooks.d/50-slurm-pmi.sh.tmp ||
        { echo "enroot-setup: $pmi_hook changed upstream: the lab's %n fix no longer applies" >&2; exit 1; }
    chmod 0755 /etc/enroot/hooks.d/50-slurm-pmi.sh.tmp
    mv -f /etc/enroot/hooks.d/50-slurm-pmi.sh.tmp /etc/enroot/hooks.d/50-slurm-pmi.sh
fi

if ! command -v nvidia-container-cli >/dev/null; then
    cat >"$stub.tmp" <<'STUB'
#!/bin/sh
# torchrun-jsc-kit lab stand-in (scripts/enroot-setup.sh): this machine has no GPUs.
for arg; do case "$arg" in --device=*) echo "lab nvidia-container-cli: devices ${arg#--device=} (none mapped)" >&2 ;; esac; done
exit 0
STUB
    chmod 0755 "$stub.tmp" && mv -f "$stub.tmp" "$stub"
fi
if [ "$had_pyxis" = 0 ] && [ -f /usr/local/lib/slurm/spank_pyxis.so ] && pgrep -x slurmd >/dev/null; then
    # slurmd and srun load SPANK plugins only at start: restart the running lab here, so that
    # no later step (make test, make demo) meets a cluster without the plugin it just got.
    echo "enroot-setup: pyxis newly installed while the cluster runs: restarting it"
    nodes=$(cat "${JWB_CLUSTER_STATE:-/run/torchrun-jsc-cluster}/nodes" 2>/dev/null || true)
    bash "$here/scripts/cluster.sh" down
    bash "$here/scripts/cluster.sh" up ${nodes:+"$nodes"}
fi
