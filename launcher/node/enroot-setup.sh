# shellcheck shell=bash
# bash "$kit/node/enroot-setup.sh" IMAGE NAME KEEP RUN RUNNING [STAGED]: the Enroot runtime's
# set-up, once per node (srun --ntasks-per-node=1) before the launch; the container is created
# from STAGED where runtime.stage copied the image to this node (jsc_stage_create), which is
# then removed (it is this job's, for this create only).
# Once per node (srun --ntasks-per-node=1). A container only ever appears under its real name
# by an atomic rename of a finished tree, so a kill at any moment leaves at most a
# ".partial-HOST-..." directory (hidden from `enroot list`, never started) that the next job
# on that node removes under the lock. The lock is in the data path (per user, node-local);
# on a shared data path the rename decides: the loser removes its copy. Containers of older
# images (same name, older stamp) are removed beyond the newest KEEP. The data path is the one
# Enroot uses (DATA_PATH_FN); a created tree found elsewhere stops the set-up with one line.
# Per-job containers (runtime.writable: NAME.jobID) of ended jobs are removed too: RUNNING is
# the user's jobs as squeue listed them once for this job (JOBS_LINES), or `unknown` (then
# none is removed). The list was made before this node took the lock, so a job newer than this
# one (a larger id) may have created its container since: that one is never removed here (a
# later job's set-up removes it once it has ended).
set -euo pipefail
image=$1 name=$2 keep=$3 run=$4 running=$5 staged=${6:-}
if [ -n "$staged" ] && [ -f "$staged" ]; then
    trap 'rm -f -- "$staged"; rmdir -- "${staged%/*}" 2>/dev/null || :' EXIT  # the job's dir
    image=$staged
fi
# shellcheck source=enroot-lib.sh
source "${BASH_SOURCE[0]%/*}/enroot-lib.sh"
data=$(enroot_data_path) host=$(hostname)
umask 077
mkdir -p -- "$data"
exec 9>"$data/.lock"
flock 9
for left in "$data/.partial-$host-"*; do
    [ -e "$left" ] || continue
    echo "enroot: removing ${left##*/}, left by an interrupted create on $host"
    enroot remove -f "${left##*/}" >/dev/null
done
publish() {  # publish TMP NAME: rename into place; false if another creator got there first
    mv -T -- "$data/$1" "$data/$2" 2>/dev/null && return 0
    enroot remove -f "$1" >/dev/null
    [ -d "$data/$2" ]
}
if [ -d "$data/$name" ]; then
    echo "enroot: reusing container $name on $host"
else
    echo "enroot: creating container $name from $image on $host"
    enroot create --name ".partial-$host-$$" -- "$image" >/dev/null
    [ -d "$data/.partial-$host-$$" ] || { echo "enroot: the new container is not in $data, the data path this set-up derived from Enroot's config on $host: set runtime.data_path" >&2; exit 1; }
    publish ".partial-$host-$$" "$name"
fi
if [ "$run" != "$name" ]; then
    echo "enroot: per-job writable container $run on $host"
    cp -a --reflink=auto -- "$data/$name" "$data/.partial-$host-$$-run"
    publish ".partial-$host-$$-run" "$run"
fi
base=${name%-*-*}
shopt -s extglob nullglob
old=()
for dir in "$data/$base"-+([0-9])-+([0-9]) "$data/$base"-+([0-9])-+([0-9]).job+([0-9]); do
    dir=${dir##*/}
    case "$dir" in
        "$name"|"$run") ;;
        *.job*)  # a per-job container whose job has ended: unlisted, not newer
            job=${dir##*.job}
            [ "$running" = unknown ] || [ "$job" -gt "${SLURM_JOB_ID:-0}" ] ||
                grep -qxF "$job" <<<"$running" || enroot remove -f "$dir" >/dev/null ;;
        *) old+=("${dir##*-} $dir") ;;
    esac
done
for dir in $(printf "%s\\n" "${old[@]}" | sort -rn | tail -n +"$((keep + 1))" | cut -d" " -f2); do
    echo "enroot: removing $dir (an older image) on $host"
    enroot remove -f "$dir" >/dev/null
done
