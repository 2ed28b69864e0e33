# shellcheck shell=bash
# bash "$kit/node/enroot-need.sh" KIND NAME: runtime.stage for the enroot and pyxis runtimes,
# on every node (srun --ntasks-per-node=1) before the broadcast (launcher/node/job.sh
# jsc_stage_create): prints this node's Slurm name when its set-up will create container NAME
# from the image (Enroot: NAME is not in the data path; pyxis: pyxis_NAME is not listed), and
# nothing when the node has it already or pyxis creates containers per job itself
# (container_scope=job: it reads the image at every step, so a staged copy would not be read).
set -euo pipefail
kind=$1 name=$2
# shellcheck source=enroot-lib.sh
source "${BASH_SOURCE[0]%/*}/enroot-lib.sh"
if [ "$kind" = enroot ]; then
    [ -d "$(enroot_data_path)/$name" ] || echo "${SLURMD_NODENAME:-$(hostname)}"
    exit 0
fi
if pyxis_job_scope; then exit 0; fi
enroot list | grep -qxF -- "pyxis_$name" || echo "${SLURMD_NODENAME:-$(hostname)}"
