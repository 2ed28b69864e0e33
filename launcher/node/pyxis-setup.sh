# shellcheck shell=bash
# bash "$kit/node/pyxis-setup.sh" IMAGE NAME KEEP [STAGED]: pyxis' named container, created by
# the kit once per node before the launch; from STAGED where runtime.stage copied the image to
# this node (jsc_stage_create), which is then removed (it is this job's, for this create only).
# pyxis unpacks a named container in place too (`enroot create --name pyxis_NAME`, listed while
# it extracts) and reuses whatever it finds under that name: a job cancelled while pyxis
# unpacked left a partial tree that the next job started (seen in the lab: torch without its
# dependencies). So the kit creates pyxis' container itself, once per node before the launch,
# and marks it complete inside its root filesystem as the last step; an unmarked container is
# removed and created again. pyxis takes the data path from Enroot's config (it drops
# ENROOT_DATA_PATH), so this script uses only Enroot's commands, never the path. Under
# pyxis' container_scope=job the name is per job and pyxis removes it: nothing to do.
set -euo pipefail
image=$1 name=pyxis_$2 keep=$3 staged=${4:-} host=$(hostname)
# shellcheck source=enroot-lib.sh
source "${BASH_SOURCE[0]%/*}/enroot-lib.sh"
if [ -n "$staged" ] && [ -f "$staged" ]; then
    trap 'rm -f -- "$staged"; rmdir -- "${staged%/*}" 2>/dev/null || :' EXIT  # the job's dir
    image=$staged
fi
jsc_cache_dir
if pyxis_job_scope; then
    echo "pyxis: container_scope=job, pyxis creates and removes the container per job"
    exit 0
fi
umask 077
exec 9>"/tmp/.torchrun-jsc-pyxis-$(id -u).lock"
flock 9
# The set-up's own starts: no GPU hook, and not this step's PMIx (Enroot's PMI hook would
# mount the set-up step's PMIx directories, which a step without MPI does not have).
export NVIDIA_VISIBLE_DEVICES=void
unset "${!PMIX_@}" "${!PMI_@}"
# The kit's command script, not the image's /etc/rc: a registry image's ENTRYPOINT would run
# instead of the check and the mark (enroot-rc.sh).
rc=${BASH_SOURCE[0]%/*}/enroot-rc.sh
have() { enroot list | grep -qxF -- "$1"; }
if have "$name"; then
    # shellcheck disable=SC2016  # $1 is the inner sh's
    if enroot start --rc "$rc" -- "$name" sh -c '[ -e "$1" ]' check /.torchrun-jsc-created 2>/dev/null; then
        echo "pyxis: reusing container $name on $host"
    else
        echo "pyxis: removing $name, left by an interrupted create on $host"
        enroot remove -f -- "$name" >/dev/null
    fi
fi
if ! have "$name"; then
    echo "pyxis: creating container $name from $image on $host"
    enroot create --name "$name" -- "$image" >/dev/null
    # shellcheck disable=SC2016  # $1 is the inner sh's
    enroot start --root --rw --rc "$rc" -- "$name" sh -c ': >"$1"' mark /.torchrun-jsc-created
fi
base=${name%-*-*}
shopt -s extglob
old=()
while read -r dir; do
    case "$dir" in
        "$name") ;;
        "$base"-+([0-9])-+([0-9])) old+=("${dir##*-} $dir") ;;
    esac
done < <(enroot list)
for dir in $(printf "%s\\n" "${old[@]}" | sort -rn | tail -n +"$((keep + 1))" | cut -d" " -f2); do
    echo "pyxis: removing $dir (an older image) on $host"
    enroot remove -f -- "$dir" >/dev/null
done
