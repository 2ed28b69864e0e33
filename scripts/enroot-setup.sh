#!/usr/bin/env bash
# Real Enroot and pyxis for the local cluster (the lab only; the kit itself never needs this).
# Idempotent; root only. Called by `make setup` (so by `make test` and `make demo`).
#
# Neither is packaged for Debian or on PyPI: the lab keeps unmodified upstream builds in
# ../shared/tools/enroot-pyxis beside the checkout. Without that folder this says so in one
# line and changes nothing; the Enroot ring-3 tests then fail saying what is missing.
#
# What it changes:
#   - ../shared/tools/enroot-pyxis/install.sh: /usr/bin/enroot*, /usr/lib/enroot, /etc/enroot,
#     the pyxis plugin and /etc/slurm/plugstack.conf.d/pyxis.conf (slurmd and srun load it at
#     start: restart the cluster if it was up: cluster.sh down && cluster.sh up);
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
tools=${ENROOT_PYXIS_TOOLS:-$here/../shared/tools/enroot-pyxis}
conf=/etc/enroot/enroot.conf.d/90-torchrun-jsc-lab.conf
stub=/usr/local/bin/nvidia-container-cli

if [ ! -x "$tools/install.sh" ]; then
    echo "enroot-setup: no $tools/install.sh (the lab's Enroot/pyxis builds): Enroot and pyxis not installed"
    exit 0
fi
[ "$(id -u)" = 0 ] || { echo "enroot-setup: must run as root" >&2; exit 1; }
had_pyxis=0
[ -f /usr/local/lib/slurm/spank_pyxis.so ] && had_pyxis=1
bash "$tools/install.sh"

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
