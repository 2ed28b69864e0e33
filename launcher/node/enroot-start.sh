# shellcheck shell=bash
# bash "$kit/node/enroot-start.sh" NAMES [ENROOT START ARGS...]: how each task enters the Enroot
# container. Forwards by name the variables of NAMES (space-separated names or PREFIX*
# patterns) that are set in this task (`--env NAME` of an unset NAME would set it empty:
# Enroot passes none by itself), gives the container exactly the GPUs Slurm gave the task
# (`void` when none, never `all`), makes and mounts the per-user cache (TORCHRUN_JSC_CACHE),
# then `enroot start` with the rest, the kit's command script (enroot-rc.sh) instead of the
# image's /etc/rc: the kit's command runs, never the ENTRYPOINT of a registry image.
set -euo pipefail
names=$1
shift
export NVIDIA_VISIBLE_DEVICES="${SLURM_STEP_GPUS:-${SLURM_JOB_GPUS:-void}}"
pass=()
for name in $(compgen -e); do
    for pattern in $names; do
        # shellcheck disable=SC2254  # a pattern: PREFIX* matches
        case "$name" in $pattern) pass+=(--env "$name"); break ;; esac
    done
done
case "${TORCHRUN_JSC_CACHE:-}" in *[[:space:]:,]*)
    echo "enroot cannot mount TORCHRUN_JSC_CACHE=$TORCHRUN_JSC_CACHE (it contains whitespace, ':' or ',')" >&2
    exit 1 ;;
esac
# shellcheck source=enroot-lib.sh
source "${BASH_SOURCE[0]%/*}/enroot-lib.sh"
jsc_cache_dir
[ -z "$cache" ] || pass+=(--mount "$cache:$cache")
exec enroot start --rc "${BASH_SOURCE[0]%/*}/enroot-rc.sh" "${pass[@]}" "$@"
