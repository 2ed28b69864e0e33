# shellcheck shell=bash
# runtime.stage on every node (srun --ntasks-per-node=1; launcher/node/job.sh jsc_stage):
#
# bash "$kit/node/stage.sh" make DIR: this job's private directory for the copy (mode 0700,
# made here: never one that exists, which another user of a shared /tmp could have made).
#
# bash "$kit/node/stage.sh" check COPY SIZE JOBS: once sbcast broadcast the image into DIR. The
# directory must be this user's, private and not a link, and the copy a plain file of this
# user of the image's SIZE: a truncated copy (a full disk) never runs. Then what this user's
# ended jobs left in the same parent directory is removed (a job cancelled or killed at its
# time limit could not remove its own): JOBS is the user's job ids as squeue listed them once
# for this job (squeue -o %A: an array task's own id), or `unknown` (then none is removed); a
# job newer than this one is never touched. The exit status is the copy's check: a leftover
# that cannot be removed is one line, not a failed job.
set -euo pipefail
uid=$(id -u) host=$(hostname)
if [ "${1:-}" = make ]; then
    if ! mkdir -m 700 -- "$2"; then
        echo "runtime.stage: cannot make this job's directory $2 on $host (above): the job" \
            "stops; is runtime.stage.to a node-local directory you may write?" >&2
        exit 1
    fi
    exit 0
fi
[ "${1:-}" = check ] || { echo "usage: stage.sh make DIR | check COPY SIZE JOBS" >&2; exit 2; }
copy=$2 size=$3 running=$4 dir=${2%/*}
have=$(stat -c %s -- "$copy" 2>/dev/null) || have=none
owner=$(stat -c %u -- "$copy" 2>/dev/null) || owner=none
place=$(stat -c %u:%a -- "$dir" 2>/dev/null) || place=none
if [ -L "$dir" ] || [ ! -d "$dir" ] || [ "$place" != "$uid:700" ]; then
    echo "runtime.stage: the directory $dir on $host is not this job's (owner:mode $place," \
        "uid $uid): the job stops" >&2
    exit 1
fi
if [ -L "$copy" ] || [ "$owner" != "$uid" ] || [ "$have" != "$size" ]; then
    echo "runtime.stage: the copy $copy on $host is not the image (size $have of $size" \
        "bytes, owner $owner, uid $uid): the job stops; is its directory full or not" \
        "node-local?" >&2
    exit 1
fi
prefix="torchrun-jsc-stage-$uid-"
for left in "${dir%/*}/$prefix"*; do
    # this job's, a link, or nothing at all (the pattern itself)
    if [ "$left" = "$dir" ] || [ -L "$left" ] || { [ ! -d "$left" ] && [ ! -f "$left" ]; }; then
        continue
    fi
    job=${left##*/"$prefix"}
    job=${job%%-*}
    case $job in '' | *[!0-9]*) continue ;; esac
    [ "$running" = unknown ] || [ "$job" -ge "${SLURM_JOB_ID:-0}" ] ||
        grep -qxF "$job" <<<"$running" && continue
    if rm -rf -- "$left"; then
        echo "runtime.stage: removed $left on $host (job $job has ended)"
    else
        echo "runtime.stage: could not remove $left on $host (above); a later job tries again" >&2
    fi
done
exit 0
