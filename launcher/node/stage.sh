# shellcheck shell=bash
# bash "$kit/node/stage.sh" COPY SIZE JOBS: on every node (srun --ntasks-per-node=1) once
# runtime.stage broadcast the image (launcher/node/job.sh jsc_stage). The copy must be a
# plain file of this user (not a link, not someone else's file in a shared /tmp) of the
# image's SIZE: a truncated copy (a full disk) never runs. Then the copies of this user's ended
# jobs in the same directory are removed (a job cancelled or killed at its time limit could
# not remove its own): JOBS is the user's jobs as squeue listed them once for this job, or
# `unknown` (then none is removed); a job newer than this one is never touched.
set -euo pipefail
copy=$1 size=$2 running=$3 host=$(hostname) uid=$(id -u)
have=$(stat -c %s -- "$copy" 2>/dev/null) || have=none
owner=$(stat -c %u -- "$copy" 2>/dev/null) || owner=none
if [ -L "$copy" ] || [ "$owner" != "$uid" ] || [ "$have" != "$size" ]; then
    echo "runtime.stage: the copy $copy on $host is not the image (size $have of $size" \
        "bytes, owner $owner, uid $uid): the job stops; is its directory full or not" \
        "node-local?" >&2
    exit 1
fi
prefix="torchrun-jsc-stage-$uid-"
for left in "${copy%/*}/$prefix"*; do
    if [ ! -f "$left" ] || [ -L "$left" ] || [ "$left" = "$copy" ]; then continue; fi
    job=${left##*/"$prefix"}
    job=${job%%-*}
    case $job in ''|*[!0-9]*) continue ;; esac
    [ "$running" = unknown ] || [ "$job" -ge "${SLURM_JOB_ID:-0}" ] ||
        grep -qxF "$job" <<<"$running" && continue
    rm -f -- "$left" && echo "runtime.stage: removed $left on $host (job $job has ended)"
done
