"""Enroot's run-time scripts, its mount rule and the data-path placeholders, for the enroot
and pyxis runtimes (launcher/runtimes/enroot.py, pyxis.py).

Where it sits: spec -> **runtimes (enroot, pyxis)** + modes -> jobscript text. The scripts are
constants run with ``bash -c SCRIPT NAME ARGS...``: on each node once (create) and in each
task (start), so per-node and per-task values expand where they exist, never at batch scope.
What only the controller knows is asked once per job, at batch scope (JOBS_LINES), and handed
to the per-node set-up as an argument: never one controller query per node.
"""

from __future__ import annotations

import re
from typing import List, Sequence, Tuple, Union

from launcher.runtimes.base import BindRule
from launcher.shell import Var, Word, case_patterns, word

# Enroot's --mount SRC:DST[:FLAGS] (and pyxis' --container-mounts, a ','-separated list of
# them) splits on ':', ',' and whitespace: a path that holds one cannot be mounted.
MOUNT_RULE = BindRule(":,", whitespace=True)

# The data path may name the user and the job through these placeholders only; the script
# fills them in on the node (never through a shell expansion written in the spec).
PLACEHOLDERS = {"user": Var("enroot_user"), "uid": Var("enroot_uid"),
                "job_id": Var("SLURM_JOB_ID")}
PLACEHOLDER_LINES = {"user": 'enroot_user="$(id -un)"', "uid": 'enroot_uid="$(id -u)"'}
_FIELD = re.compile(r"\{([^{}]*)\}")


def placeholder_problem(text: str) -> str:
    """Why ``text`` is not a valid data path, or '' when it is."""
    if any(c in text for c in "$`\\"):
        return "no shell expansion ('$', '`', '\\'): name the user or job with " + \
            ", ".join("{%s}" % k for k in PLACEHOLDERS)
    unknown = [m for m in _FIELD.findall(text) if m not in PLACEHOLDERS]
    if unknown or "{" in _FIELD.sub("", text) or "}" in _FIELD.sub("", text):
        return "the only placeholders are " + ", ".join("{%s}" % k for k in PLACEHOLDERS)
    return ""


def data_path_word(text: str) -> Tuple[Word, List[str]]:
    """The data path as a run-time word, and the batch lines its placeholders need."""
    parts: List[Union[str, Var]] = []
    used: List[str] = []
    for i, piece in enumerate(_FIELD.split(text)):
        if i % 2 == 0:
            parts.append(piece)
        else:
            parts.append(PLACEHOLDERS[piece])
            if piece in PLACEHOLDER_LINES and PLACEHOLDER_LINES[piece] not in used:
                used.append(PLACEHOLDER_LINES[piece])
    return word(*parts), used


# The data path Enroot itself uses on this node, printed: where the set-up keeps its lock and
# partial trees (SETUP) and what the doctor's `space` cell measures (launcher/doctor/local.py).
# Without runtime.data_path the kit sets no ENROOT_DATA_PATH: the site's Enroot config decides.
# Enroot >= 4.0 says it: `enroot info` prints "  ENROOT_DATA_PATH=..." after reading its
# config. Older Enroot (3.x): its rule re-derived from NVIDIA/enroot enroot.in ("BEGIN CONFIG",
# the same in v3.2.0-v4.1.2; doc/configuration.md): a non-empty ENROOT_DATA_PATH in the
# environment wins; else the first ENROOT_DATA_PATH line of enroot.conf, then of
# enroot.conf.d/*.conf in glob order (config::export never overwrites a value already set),
# read with `IFS=$' \t=' read -r key value` and expanded with `eval echo` as Enroot does; else
# ${XDG_DATA_HOME:-$HOME/.local/share}/enroot. enroot.conf is the file Enroot's script reads
# (its `config::init "SYSCONFDIR/enroot.conf"` line; /etc/enroot/enroot.conf as packaged).
DATA_PATH_FN = r"""enroot_data_path() {
    local found conf file key value
    found=$(enroot info 2>/dev/null | sed -n 's/^ *ENROOT_DATA_PATH=//p') || found=
    if [ -z "$found" ]; then
        found=${ENROOT_DATA_PATH:-}
        conf=$(sed -n 's/^config::init "\(.*\)"$/\1/p' "$(command -v enroot)" 2>/dev/null) || conf=
        conf=${conf%%$'\n'*}
        for file in "${conf:=/etc/enroot/enroot.conf}" "$conf.d"/*.conf; do
            [ -z "$found" ] && [ -f "$file" ] || continue
            while IFS=$' \t=' read -r key value; do
                if [ "$key" = ENROOT_DATA_PATH ] && [ -z "$found" ]; then
                    found=$(eval echo "$value" 2>/dev/null) || found=
                fi
            done <"$file"
        done
        [ -n "$found" ] || found=${XDG_DATA_HOME:-${HOME:-$(echo ~)}/.local/share}/enroot
    fi
    printf '%s\n' "$found"
}"""


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
SETUP = r"""set -euo pipefail
image=$1 name=$2 keep=$3 run=$4 running=$5
DATA_PATH_FN
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
done""".replace("DATA_PATH_FN\n", DATA_PATH_FN + "\n")

# The user's jobs for SETUP, asked once per job here at batch scope (squeue is a query to the
# controller: once per node would be 1,000 at once on a 1,000-node job), `unknown` when squeue
# fails. It reaches the set-up as one argument, whose length Linux caps at 128 KiB: a longer
# list (some 14,000 jobs) counts as unknown too, rather than failing the job's set-up.
JOBS_VAR = "enroot_jobs"
JOBS_LINES = (
    "# The user's jobs, asked once per job (not per node): the set-up removes a per-job "
    "container\n# only when its job is not among them.",
    'enroot_jobs="$(squeue -h -u "$(id -un)" -o %i 2>/dev/null)" || enroot_jobs=unknown',
    'if [ "${#enroot_jobs}" -gt 100000 ]; then enroot_jobs=unknown; fi',
)


# The per-user cache directory (launcher.runtimes.base.cache_lines), made on the node: never
# followed through a link or taken over from another user (a planted Triton kernel would run
# in this user's job). Enroot mounts it at its own path over the container's private /tmp;
# pyxis binds the host's /tmp itself.
CACHE_DIR = """\
cache=${TORCHRUN_JSC_CACHE:-}
if [ -n "$cache" ]; then
    mkdir -p -m 700 -- "$cache"
    if [ -L "$cache" ] || [ ! -O "$cache" ]; then
        echo "TORCHRUN_JSC_CACHE=$cache on $(hostname) is a link or not this user's: set TORCHRUN_JSC_CACHE to a directory of your own" >&2
        exit 1
    fi
fi
"""
CACHE_MOUNT = f"""\
case "${{TORCHRUN_JSC_CACHE:-}}" in {MOUNT_RULE.glob()})
    echo "enroot cannot mount TORCHRUN_JSC_CACHE=$TORCHRUN_JSC_CACHE (it contains {MOUNT_RULE.what()})" >&2
    exit 1 ;;
esac
""" + CACHE_DIR + """\
[ -z "$cache" ] || pass+=(--mount "$cache:$cache")
"""


# pyxis unpacks a named container in place too (`enroot create --name pyxis_NAME`, listed while
# it extracts) and reuses whatever it finds under that name: a job cancelled while pyxis
# unpacked left a partial tree that the next job started (seen in the lab: torch without its
# dependencies). So the kit creates pyxis' container itself, once per node before the launch,
# and marks it complete inside its root filesystem as the last step; an unmarked container is
# removed and created again. pyxis takes the data path from Enroot's config (it drops
# ENROOT_DATA_PATH), so this script uses only Enroot's commands, never the path. Under
# pyxis' container_scope=job the name is per job and pyxis removes it: nothing to do.
PYXIS_MARKER = "/.torchrun-jsc-created"
PYXIS_SETUP = r"""set -euo pipefail
image=$1 name=pyxis_$2 keep=$3 host=$(hostname)
CACHE_DIR
plugstack=$(scontrol show config 2>/dev/null | sed -n 's/^PlugStackConfig *= *//p') || plugstack=""
if [ -n "$plugstack" ] && grep -rqs -- "container_scope=job" "${plugstack%/*}"; then
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
have() { enroot list | grep -qxF -- "$1"; }
if have "$name"; then
    if enroot start -- "$name" sh -c '[ -e "$1" ]' check MARKER 2>/dev/null; then
        echo "pyxis: reusing container $name on $host"
    else
        echo "pyxis: removing $name, left by an interrupted create on $host"
        enroot remove -f -- "$name" >/dev/null
    fi
fi
if ! have "$name"; then
    echo "pyxis: creating container $name from $image on $host"
    enroot create --name "$name" -- "$image" >/dev/null
    enroot start --root --rw -- "$name" sh -c ': >"$1"' mark MARKER
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
done""".replace("MARKER", PYXIS_MARKER)
PYXIS_SETUP = PYXIS_SETUP.replace("CACHE_DIR\n", CACHE_DIR)


def start_script(names: Sequence[str], cache: bool = False) -> str:
    """Run in each task: forward by name the variables of ``names`` (names or PREFIX*) that
    are set in this task (`--env NAME` of an unset NAME would set it empty), and give the
    container exactly the GPUs Slurm gave the task (`void` when none, never `all`).
    ``cache``: make and mount TORCHRUN_JSC_CACHE (CACHE_MOUNT)."""
    return ("set -euo pipefail\n"
            'export NVIDIA_VISIBLE_DEVICES="${SLURM_STEP_GPUS:-${SLURM_JOB_GPUS:-void}}"\n'
            "pass=()\n"
            "for name in $(compgen -e); do\n"
            f'    case "$name" in {case_patterns(names)}) pass+=(--env "$name") ;; esac\n'
            "done\n" + (CACHE_MOUNT if cache else "") +
            'exec enroot start "${pass[@]}" "$@"')


# Always forwarded: Slurm's variables (per-task ones included) and the GPU selection.
# Always forwarded when set in the task: Slurm's variables (per-task ones included), the GPU
# selection, and what the kit's task scripts export (ranks, rendezvous, socket interfaces).
TASK_NAMES = ("SLURM_*", "SLURMD_NODENAME", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES",
              "GPU_DEVICE_ORDINAL", "ROCR_VISIBLE_DEVICES", "RANK", "LOCAL_RANK",
              "WORLD_SIZE", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "GLOO_SOCKET_IFNAME",
              "NCCL_SOCKET_IFNAME", "OMPI_MCA_btl_tcp_if_include", "HOROVOD_GLOO_IFACE")
