# shellcheck shell=bash
# shellcheck disable=SC2034,SC2154  # sets variables for the jobscript, reads those it set
# The kit's functions for the batch script, sourced by every jobscript the composer renders:
#     source "$kit/node/job.sh" VERSION
# The jobscript says what (its spec's values, as arguments); these say how. Bash, run on the
# first node of the allocation; node-side Python is started as python3 -I "$kit/node/run.py".
# docs/development/node-code.md. Names: jsc_* functions; the variables they set are named
# where they are set.

# The jobscript was rendered by kit VERSION: this copy must be the same one.
jsc_kit_version=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' "$kit/__init__.py")
if [ "$jsc_kit_version" != "${1:-}" ]; then
    echo "jsc-compose: this jobscript was rendered by torchrun-jsc-kit ${1:-?}, but the kit at" \
        "$kit is ${jsc_kit_version:-unreadable}: render it again with this kit" \
        "(jsc-compose render/submit) or install ${1:-?} there" >&2
    return 1
fi
# The kit's physical path: containers bind it at that path, where a symlink on the way (a
# submit directory's launcher -> the install, /p/project -> /p/project1) would not resolve.
kit=$(cd -P -- "$kit" && pwd)
# Node 0's torchrun_jsc (launcher/task/run.py) names the kit it runs in the job's log.
export TORCHRUN_JSC_KIT_LOG=1
# When the batch script started (the timeline's first mark, written by jsc_timeline_setup).
jsc_epoch() {  # jsc_t: now, seconds since the epoch with a fraction (bash 5; else date)
    jsc_t=${EPOCHREALTIME:-}
    jsc_t=${jsc_t/,/.}
    if [ -z "$jsc_t" ]; then jsc_t=$(date +%s.%N); fi
}
jsc_epoch
jsc_batch_t0=$jsc_t

# A site profile's defaults (launcher/model.py SITE_PROFILES): export each NAME=VALUE where
# the job's environment (a module, the submit environment) has no value; one it has is kept.
jsc_defaults() {  # NAME=VALUE...
    local pair name
    for pair in "$@"; do
        name=${pair%%=*}
        export "$name=${!name:-${pair#*=}}"
    done
}

# A time in a log line: the node's local time with its zone, to the second (launcher/node/
# stacks.py TIME_FORMAT: the same), e.g. 2026-11-27 13:03:41 CET.
jsc_now() {
    date "+%Y-%m-%d %H:%M:%S %Z"
}

# cpus_per_node: the CPUs of one task per node, the smallest node's count in
# SLURM_JOB_CPUS_PER_NODE (e.g. 48(x2),32). Every srun asks for its own on its command line
# (--cpus-per-task; Slurm >= 23.11 ignores SRUN_CPUS_PER_TASK, and a bound task's workers all
# share its CPUs). Under one thread per core (--hint=nomultithread, --threads-per-core=1)
# those counts are hardware threads, a step may use one per core and srun refuses more ("More
# processors requested than permitted"): count cores, by the node's ThreadsPerCore in Slurm's
# own record.
jsc_cpus_per_node() {
    local counts count node_info threads_per_core=1
    cpus_per_node=''
    IFS=, read -ra counts <<<"$SLURM_JOB_CPUS_PER_NODE"
    for count in "${counts[@]}"; do
        count=${count%%(*}
        if [ -z "$cpus_per_node" ] || [ "$count" -lt "$cpus_per_node" ]; then cpus_per_node=$count; fi
    done
    case "${SLURM_HINT:-},${SLURM_THREADS_PER_CORE:-}" in
        *nomultithread*|*,1)
            node_info=$(scontrol show node "${SLURMD_NODENAME:-$(hostname)}") || node_info=""
            case "$node_info" in
                *ThreadsPerCore=[0-9]*)
                    threads_per_core=${node_info##*ThreadsPerCore=}
                    threads_per_core=${threads_per_core%%[!0-9]*} ;;
            esac
            if [ "$threads_per_core" -gt 1 ] && [ "$cpus_per_node" -ge "$threads_per_core" ]; then
                cpus_per_node=$((cpus_per_node / threads_per_core))
            fi ;;
    esac
}

# hostnames: the allocation's nodes, one per line; first_node: the first (the rendezvous runs
# there); no fallback.
jsc_first_node() {
    hostnames="$(scontrol show hostnames "$SLURM_JOB_NODELIST")"
    first_node="${hostnames%%$'\n'*}"
    if [ -z "$first_node" ]; then echo "no first node in SLURM_JOB_NODELIST" >&2; return 1; fi
}

# host_suffix: the first of SUFFIX... whose NODE+SUFFIX resolves here (launcher/features/site.py:
# a site profile's rule). Outside the job's nodes (no SLURMD_NODENAME: an salloc shell on a
# login node) the first one, with one line; on a node where none resolves, one line and 1.
jsc_pick_host_suffix() {  # NODE SUFFIX...
    local suffix tried=""
    for suffix in "${@:2}"; do
        if getent hosts "$1$suffix" >/dev/null; then host_suffix=$suffix; return 0; fi
        tried+="${tried:+, }$1$suffix"
    done
    if [ -z "${SLURMD_NODENAME:-}" ]; then
        host_suffix=$2
        echo "jsc-compose: $1$2 does not resolve on $(hostname), outside the job's nodes" \
            "(tried $tried): using it as the inter-node name" >&2
        return 0
    fi
    echo "jsc-compose: no inter-node name of $1 resolves (SYSTEMNAME ${SYSTEMNAME:-unset};" \
        "tried $tried): set site.hostname_suffix in the spec" >&2
    return 1
}

# rdzv_host on a site that names no inter-node name (site generic): NODE (this node, the
# first), or its fast interface's address where NODE resolves to another network
# (launcher/node/net/fast.py: InfiniBand, Slingshot hsn*, or those IFNAME names); the choice
# and why in one line. Never fails: where the rule cannot run, the name.
jsc_endpoint() {  # NODE [IFNAME]
    rdzv_host=$(python3 -I "$kit/node/run.py" endpoint "$@") || rdzv_host=""
    if [ -z "$rdzv_host" ]; then rdzv_host=$1; fi
}

# rdzv_port: BASE + job id % SPAN (launcher/slurm.py), or, when something on the first node
# (this one) already listens there (another job, ids SPAN apart), the next free one up,
# wrapping inside the span (a connection that succeeds: something listens there).
jsc_rdzv_port() {  # HOST BASE SPAN TRIES
    local _
    rdzv_port=$(($2 + SLURM_JOB_ID % $3))
    for _ in $(seq "$4"); do
        (: <"/dev/tcp/$1/$rdzv_port") 2>/dev/null || break
        rdzv_port=$(($2 + (rdzv_port - $2 + 1) % $3))
    done
}

# A venv built by `jsc-compose venv` records its modules in RECORD: warn (one line) where they
# differ from the MODULES (newline-separated) this job loads.
jsc_venv_check() {  # RECORD MODULES
    local built
    if [ -f "$1" ] && [ "$(cat -- "$1")" != "$2" ]; then
        built="$(cat -- "$1")"
        echo "warning: the venv was built with modules [${built//$'\n'/ }] but this job loads" \
            "[${2//$'\n'/ }] ($1): rebuild it with jsc-compose venv" >&2
    fi
}

# Stop the job where a path cannot be bound by RUNTIME (its bind syntax separates with the
# characters PATTERN matches, WHAT in words): the kit's directory, the submit directory.
jsc_bindable() {  # RUNTIME PATTERN WHAT PATH...
    local path
    for path in "${@:4}"; do
        # shellcheck disable=SC2254  # a pattern
        case "$path" in $2)
            echo "$1 cannot bind $path (it contains $3)" >&2; exit 1 ;;
        esac
    done
}

# Stop the job where IMAGE (a SIF or squashfs file) is for another CPU architecture than this
# node's (launcher/node/image_arch.py; status 3): one line naming both, not an exec format
# error deep in a log. An image this cannot read, or no python3 here, stops nothing.
jsc_image_arch() {  # IMAGE
    local rc=0
    if [ -f "$1" ]; then python3 -I "$kit/node/run.py" image-arch "$1" || rc=$?; fi
    [ "$rc" -ne 3 ]
}

# enroot_name: NAME-SIZE-MTIME of the squashfs IMAGE (enroot_image): a rebuilt image gets a
# fresh container, an unchanged one is reused by later jobs (Enroot and pyxis keep named
# containers across jobs).
jsc_enroot_name() {  # NAME IMAGE
    enroot_image=$2
    enroot_stamp=$(stat -L -c %s-%Y -- "$enroot_image")
    enroot_name="$1-$enroot_stamp"
}

# --- Staging (runtime.stage; docs/guide/runtimes.md, "Staging the image to the nodes") ------
# IMAGE copied once to every node's DIR (node-local) by Slurm's tree broadcast (sbcast): one
# read of the shared filesystem instead of one per node and step. Every node then checks its
# copy (launcher/node/stage.sh: this user's, its full size: a truncated copy never runs) and
# removes copies that ended jobs of this user left there; the copy is removed at the job's end
# (the EXIT trap, jsc_on_exit: jsc_unstage, on the live nodes only after a loss: jsc_live).
# stage_image: the copy's path, the same on every node. With NODES (a comma-separated list)
# only those get it, and the set-up that creates the container from it removes it (enroot,
# pyxis: jsc_stage_create).
jsc_stage() {  # IMAGE DIR [NODES]
    local size t0 jobs count=$nnodes where=() what="the steps run"
    if [ ! -f "$1" ]; then
        echo "runtime.stage: $1 is not a file on $(hostname): only an image file (.sif," \
            "squashfs) can be staged; runtime.stage: false runs it where it is" >&2
        return 1
    fi
    # A directory of this job's own on every node, under a name nobody can know before the job
    # starts (a name squeue predicts could be taken first by another user of a shared /tmp),
    # made by stage.sh (mkdir -m 700: never one that exists); the copy goes in it.
    stage_dir="$2/torchrun-jsc-stage-$(id -u)-$SLURM_JOB_ID-$(od -An -N6 -tx1 /dev/urandom |
        tr -d ' \n')"
    stage_image="$stage_dir/${1##*/}"
    size=$(stat -L -c %s -- "$1")
    jsc_epoch
    t0=$jsc_t
    if [ -n "${3:-}" ]; then
        count=$(tr , '\n' <<<"$3" | grep -c .)
        where=("--nodelist=$3")
        what="the set-up creates the container from"
    else
        jsc_unstage_due=1
        trap jsc_on_exit EXIT
    fi
    srun --kill-on-bad-exit=1 "${where[@]}" "--nodes=$count" "--ntasks=$count" \
        --ntasks-per-node=1 --cpus-per-task=1 bash "$kit/node/stage.sh" make "$stage_dir" ||
        return 1
    if ! sbcast "${where[@]}" --force --preserve "$1" "$stage_image"; then
        echo "runtime.stage: sbcast could not copy $1 to $2 on every node (above): set" \
            "runtime.stage.to to a node-local directory every node has, or runtime.stage:" \
            "false" >&2
        return 1
    fi
    jobs=$(jsc_user_jobs)
    srun --kill-on-bad-exit=1 "${where[@]}" "--nodes=$count" "--ntasks=$count" \
        --ntasks-per-node=1 --cpus-per-task=1 bash "$kit/node/stage.sh" check "$stage_image" \
        "$size" "$jobs" || return 1
    jsc_epoch
    echo "job ${SLURM_JOB_ID}: image $1 staged to $2 on $count node$([ "$count" -eq 1 ] ||
        echo s) in" \
        "$(awk "BEGIN { printf \"%.1f\", $jsc_t - $t0 }") s (sbcast, $size bytes):" \
        "$what $stage_image"
}

# runtime.stage for enroot and pyxis (KIND): the squashfs enroot_image goes only to the nodes
# whose set-up will create container enroot_name from it (launcher/node/enroot-need.sh asks
# every node once); the set-up reads the copy and removes it. None needs it: nothing staged,
# stage_image empty (the set-up reads the image where it is, should a node need it after all).
jsc_stage_create() {  # KIND DIR
    local need
    stage_image=""
    need=$(srun --kill-on-bad-exit=1 "--nodes=$nnodes" "--ntasks=$nnodes" --ntasks-per-node=1 \
        --cpus-per-task=1 bash "$kit/node/enroot-need.sh" "$1" "$enroot_name") || return 1
    need=$(sort -u <<<"$need" | paste -sd, -)
    if [ -z "$need" ]; then
        echo "job ${SLURM_JOB_ID}: container $enroot_name is on every node already: not staged"
        return 0
    fi
    jsc_stage "$enroot_image" "$2" "$need"
}

jsc_unstage() {  # from the EXIT trap: remove the copy on every live node (once)
    jsc_unstage_due=""
    jsc_live
    if [ -n "$live_lost" ]; then
        echo "job ${SLURM_JOB_ID}: unstaging on $live_nnodes of $nnodes nodes ($live_lost lost)"
    fi
    if srun --overlap --kill-on-bad-exit=0 ${live_where[@]+"${live_where[@]}"} \
        "--nodes=$live_nnodes" "--ntasks=$live_nnodes" \
        --ntasks-per-node=1 --cpus-per-task=1 rm -rf -- "$stage_dir"; then
        echo "job ${SLURM_JOB_ID}: staged image $stage_image removed on $live_nnodes nodes"
    else
        echo "runtime.stage: $stage_image was not removed on every node (above): the next" \
            "job of yours that stages to that node removes it" >&2
    fi
}

# The batch script's EXIT trap (set by jsc_stage, jsc_spare_nodes): the staged copy removed
# on the live nodes, then the file that says which nodes live. Runs after a failed launch too.
jsc_on_exit() {
    trap - EXIT
    if [ -n "${jsc_unstage_due:-}" ]; then jsc_unstage; fi
    if [ -n "${jsc_retired_file:-}" ]; then rm -f -- "$jsc_retired_file"; fi
}

# live_nnodes, live_where (--exclude=NODES, or nothing) and live_lost (the nodes left out,
# space-separated): for a step over the allocation after the spares' supervisor retired nodes
# (lost, or hung and replaced; launcher/node/retired.py says why and why this file). The job
# runs with --no-kill, so a lost node stays in the allocation, where srun over all $nnodes
# fails ("Required node not available (down)") or waits until Slurm declares it down. Only
# whole lines naming a node of the allocation count (the last one may still be written), each
# once. None retired (or no spares): $nnodes and nothing to exclude, the step as without.
jsc_live() {
    local node
    live_nnodes=$nnodes live_where=() live_lost=""
    if [ -z "${jsc_retired_file:-}" ] || [ ! -s "$jsc_retired_file" ]; then return 0; fi
    while IFS= read -r node; do
        case " $live_lost " in *" $node "*) continue ;; esac
        case $'\n'"$hostnames"$'\n' in *$'\n'"$node"$'\n'*) ;; *) continue ;; esac
        live_lost+="${live_lost:+ }$node"
        live_nnodes=$((live_nnodes - 1))
    done <"$jsc_retired_file"
    if [ -n "$live_lost" ]; then live_where=("--exclude=${live_lost// /,}"); fi
}

# The doctor's step (features/preflight.py): STEP... runs its checks on every node, one srun
# task each; their reports go to `doctor OUTPUT` here with doctor_conf, the rendezvous and the
# node list: table (launch.preflight: printed, a cross fails) or json (for `jsc-compose
# doctor`). doctor_t0: the table reports the step's duration.
jsc_doctor() {  # OUTPUT STEP...
    doctor_t0=$(date +%s.%N)
    "${@:2}" | python3 -I "$kit/node/run.py" doctor "$1" "$doctor_conf" "$rdzv_host" \
        "$rdzv_port" "$hostnames" "$doctor_t0"
}

# Caches (Enroot, pyxis): the container's root is read-only and $HOME is not mounted, so
# Triton (torch.compile), Hugging Face, torch hub and pip write to a node-local per-user
# directory unless set (docs/guide/runtimes.md: Caches).
jsc_cache_env() {
    export TORCHRUN_JSC_CACHE="${TORCHRUN_JSC_CACHE:-/tmp/torchrun-jsc-cache-$UID}"
    export XDG_CACHE_HOME="${XDG_CACHE_HOME:-$TORCHRUN_JSC_CACHE}"
    export TRITON_CACHE_DIR="${TRITON_CACHE_DIR:-$XDG_CACHE_HOME/triton}" \
        HF_HOME="${HF_HOME:-$XDG_CACHE_HOME/huggingface}" \
        TORCH_HOME="${TORCH_HOME:-$XDG_CACHE_HOME/torch}" \
        PIP_CACHE_DIR="${PIP_CACHE_DIR:-$XDG_CACHE_HOME/pip}"
}

# The user's jobs, printed, asked once per job (a query to the controller: once per node would
# be 1,000 at once on a 1,000-node job), `unknown` when squeue fails. It reaches the Enroot
# set-up as one argument, whose length Linux caps at 128 KiB: a longer list (some 14,000 jobs)
# counts as unknown too, rather than failing the job's set-up.
jsc_user_jobs() {
    local jobs
    # %A: each job's own id, an array task's too (%i prints an array task as BASE_INDEX,
    # which no staged copy or per-job container is named by).
    jobs="$(squeue -h -u "$(id -un)" -o %A 2>/dev/null)" || jobs=unknown
    if [ "${#jobs}" -gt 100000 ]; then jobs=unknown; fi
    printf '%s\n' "$jobs"
}

# The job's first lines: nodes, rendezvous, where the per-node logs go.
jsc_job_line() {
    local plural=s
    if [ "$nnodes" -eq 1 ]; then plural=""; fi
    echo "job ${SLURM_JOB_ID}: ${nnodes} node${plural}, rendezvous ${rdzv_host}:${rdzv_port}"
}

# --- Hangs (docs/guide/hangs.md) ------------------------------------------------------------
# Every rank arms a stack dump at start-up (the kit's sitecustomize, $kit/task/hook, first on
# the PYTHONPATH each task finds where it runs: $kit/task/hook.sh); `jsc-compose stacks JOBID`
# and this script before the job is killed print them grouped; flight recorder too.
# hangs_dir: $PWD/.hangs/JOBID (the submit directory: shared, bound into every container),
# removed after the launch unless it holds a hang report (jsc_after_launch). The ranks' dumps
# are node-local (hook: _dump_file); each node's progress marks are one file.
jsc_hangs_setup() {  # RANK_VAR...
    jsc_timeline_setup
    hangs_dir="$PWD/.hangs/$SLURM_JOB_ID"
    mkdir -p -- "$hangs_dir/fr"
    export TORCHRUN_JSC_STACKS="$hangs_dir"
    # Only processes with one of these run the program as a rank (never a per-node
    # launcher, which may carry PMIX_RANK/PMI_RANK/OMPI_COMM_WORLD_RANK too).
    export TORCHRUN_JSC_STACKS_RANK_VARS="$*"
    # The flight recorder (torch's names before and after 2.8), the user's values kept.
    export TORCH_FR_BUFFER_SIZE="${TORCH_FR_BUFFER_SIZE:-${TORCH_NCCL_TRACE_BUFFER_SIZE:-2000}}" \
        TORCH_NCCL_DUMP_ON_TIMEOUT="${TORCH_NCCL_DUMP_ON_TIMEOUT:-1}" \
        TORCH_FR_DUMP_TEMP_FILE="${TORCH_FR_DUMP_TEMP_FILE:-${TORCH_NCCL_DEBUG_INFO_TEMP_FILE:-$hangs_dir/fr/rank-}}"
    export TORCH_NCCL_TRACE_BUFFER_SIZE="${TORCH_NCCL_TRACE_BUFFER_SIZE:-$TORCH_FR_BUFFER_SIZE}" \
        TORCH_NCCL_DEBUG_INFO_TEMP_FILE="${TORCH_NCCL_DEBUG_INFO_TEMP_FILE:-$TORCH_FR_DUMP_TEMP_FILE}"
    # The stacks, once, into this log: at SIGURG (#SBATCH --signal=B:URG@60 before the time
    # limit, or `scancel --batch --signal=URG JOBID`) and at SIGTERM (scancel, the time limit:
    # Slurm signals the ranks at the same time, so this one is a race). The launch runs in
    # the background and is waited for (jsc_wait_launch): bash runs a trap only between
    # commands.
    jsc_stacks_done=0
    trap 'jsc_print_stacks SIGURG' URG
    trap 'jsc_print_stacks SIGTERM' TERM
}

# collector: the collector's argv, one for the trap and the watcher (`jsc-compose stacks` runs
# its twin, launcher/features/hangs.py stacks_srun): one task per node beside the running steps
# (--overlap), outside any container: each signals its node's ranks, waits up to 10 s for
# their dumps and prints them as JSON lines. On the live nodes (jsc_live) as they are now:
# the traps build it when they fire; the spares' supervisor, which runs the watcher with
# launch.hang_action replace, leaves the nodes it retired out of it itself.
jsc_collector() {
    jsc_live
    collector=(srun --overlap "--jobid=${SLURM_JOB_ID}" ${live_where[@]+"${live_where[@]}"}
        "--nodes=${live_nnodes}" "--ntasks=${live_nnodes}"
        --ntasks-per-node=1 --cpus-per-task=1 --kill-on-bad-exit=0
        python3 -I "$kit/node/run.py" stacks node "${SLURM_JOB_ID}" 10)
}

jsc_stacks_srun() {
    jsc_collector
    if [ -n "$live_lost" ]; then
        echo "job ${SLURM_JOB_ID}: stacks on $live_nnodes of $nnodes nodes ($live_lost lost)" >&2
    fi
    "${collector[@]}"
}

jsc_print_stacks() {  # SIGNAL
    if [ "$jsc_stacks_done" = 1 ]; then return; fi
    jsc_stacks_done=1
    echo "job ${SLURM_JOB_ID}: $1 at $(jsc_now): every rank's stack (jsc-compose stacks)"
    jsc_stacks_srun | python3 -I "$kit/node/run.py" stacks report "${SLURM_JOB_ID}" || true
}

# Progress deadline (launch.hang_timeout): every PERIOD s each rank's hook notes the
# collectives it has issued (and launcher.progress() calls) in $hangs_dir/progress; the
# watcher started beside the launch ends the job once no rank made progress for TIMEOUT s,
# after printing every rank's stack, SIGKILL KILL_AFTER s after its SIGTERM to the steps.
jsc_deadline_setup() {  # PERIOD
    mkdir -p -- "$hangs_dir/progress"
    printf '%s\n' "$1" >"$hangs_dir/progress/period"
    rm -f -- "$hangs_dir/no-progress"
}

# With `replace` (launch.hang_action, job.spare_nodes): no process here; jsc_spares_launch
# hands jsc_watch_args to the spares' supervisor, which runs the same watcher and replaces the
# node behind by a spare (launcher/node/spares.py), or ends the job as here.
jsc_watch() {  # TIMEOUT PERIOD KILL_AFTER [replace]: in the background; jsc_after_launch stops it
    jsc_collector
    jsc_watching=1
    if [ "${4:-}" = replace ]; then
        jsc_watch_args=(--hang "$hangs_dir" "$1" "$2" "$3" "${#collector[@]}" "${collector[@]}")
        return
    fi
    python3 -I "$kit/node/run.py" stacks watch "${SLURM_JOB_ID}" "$hangs_dir" "$1" "$2" "$3" \
        -- "${collector[@]}" &
    jsc_watch_pid=$!
}

# launch_rc: the launch's exit status (started with & just before: $!), waited for again
# while a trap interrupted the wait and the launch still runs; then jsc_after_launch.
jsc_wait_launch() {
    launch_pid=$!
    launch_rc=0
    jsc_mark step_start
    wait "$launch_pid" || launch_rc=$?
    while [ "$launch_rc" -gt 128 ] && kill -0 "$launch_pid" 2>/dev/null; do
        launch_rc=0
        wait "$launch_pid" || launch_rc=$?
    done
    jsc_after_launch
}

# After a failed launch whose ranks left flight-recorder dumps (a collective timed out): where
# they are and the command that says which rank never joined which collective (torch's
# analyser needs torch: the image's, not the batch node's). With the watcher: stop it (the
# spares' supervisor runs it with hang_action replace, jsc_watching) and, if it ended the job,
# its line last and exit 124 (as timeout(1)). $hangs_dir is removed unless it
# holds a hang report (the watcher's line, flight-recorder dumps): O(nodes) files, kept only
# where they say something.
jsc_after_launch() {
    local fr_dumps=("$hangs_dir"/fr/*)
    jsc_mark launch_end
    jsc_timeline_fold
    if [ "$launch_rc" -ne 0 ] && [ -e "${fr_dumps[0]}" ]; then
        echo "job ${SLURM_JOB_ID}: flight recorder: ${#fr_dumps[@]} rank dumps in" \
            "$hangs_dir/fr; which rank missed which collective: python3 -m" \
            "torch.distributed.flight_recorder.fr_trace $hangs_dir/fr -p rank- (in the image)" >&2
    fi
    if [ -n "${jsc_watch_pid:-}" ]; then
        kill "$jsc_watch_pid" 2>/dev/null || true
        wait "$jsc_watch_pid" 2>/dev/null || true
    fi
    if [ -n "${jsc_watch_pid:-}${jsc_watching:-}" ] && [ -s "$hangs_dir/no-progress" ]; then
        cat -- "$hangs_dir/no-progress" >&2
        exit 124
    fi
    if [ ! -e "${fr_dumps[0]}" ]; then rm -rf -- "$hangs_dir"; fi
}

# --- Timeline (docs/guide/timeline.md) ---------------------------------------------------------
# When each node passed each phase of the start-up: one line "TIME PHASE [WHO]" per mark,
# appended to $PWD/.timeline/JOBID/NODE (one file per node while the job runs; `jsc-compose
# timeline JOBID` reads them): here the batch script's (batch_start, step_start, launch_end),
# each task's container_up (launcher/task/hook.sh), torchrun_jsc's and the ranks'
# (hook/sitecustomize.py phase()). timeline_dir; TORCHRUN_JSC_TIMELINE for the tasks. After
# the launch they are folded into one file (jsc_timeline_fold). A requeued job's marks (or an
# earlier job's of the same id) start afresh: the timeline is this attempt's.
jsc_timeline_setup() {
    timeline_dir="$PWD/.timeline/$SLURM_JOB_ID"
    jsc_timeline_node="${SLURMD_NODENAME:-$(hostname)}"
    jsc_timeline_node="${jsc_timeline_node%%.*}"
    rm -rf -- "$timeline_dir" "$timeline_dir.marks"
    mkdir -p -- "$timeline_dir"
    export TORCHRUN_JSC_TIMELINE="$timeline_dir"
    jsc_mark batch_start "$jsc_batch_t0"
}

# After the launch: the nodes' files folded into one, .timeline/JOBID.marks (lines "NODE TIME
# PHASE [WHO]"), and the folder removed: one file per job on the submit directory's storage
# ($PROJECT's inode quota), not one per node. Never fails the job; a fold that fails keeps
# the folder, which `jsc-compose timeline` reads as well.
jsc_timeline_fold() {
    local files
    if [ -z "${timeline_dir:-}" ] || [ ! -d "$timeline_dir" ]; then return 0; fi
    files=("$timeline_dir"/*)
    if [ -e "${files[0]}" ] &&
        awk '{ n = FILENAME; sub(/.*\//, "", n); print n, $0 }' "${files[@]}" \
            >"$timeline_dir.marks.tmp" 2>/dev/null &&
        mv -f -- "$timeline_dir.marks.tmp" "$timeline_dir.marks"; then
        rm -rf -- "$timeline_dir" 2>/dev/null || true
    else
        rm -f -- "$timeline_dir.marks.tmp" 2>/dev/null || true
    fi
}

jsc_mark() {  # PHASE [TIME]: one line on this node's timeline (never fails the job)
    if [ -z "${timeline_dir:-}" ]; then return 0; fi
    jsc_epoch
    { printf '%s %s\n' "${2:-$jsc_t}" "$1" >>"$timeline_dir/$jsc_timeline_node"; } 2>/dev/null ||
        true
}

# --- Requeue (job.requeue; launcher/features/requeue.py says how a request travels) -------
# SIGNAL comes BEFORE s before the time limit, or with a preemption (scancel -b --signal=SIG
# JOBID). Every rank gets it, saves at the next step boundary, rank 0 writes $REQUEUE_MARKER,
# all exit 0; then the job is requeued. PASS_ON: scancel (the launch is a Slurm step) or kill
# (mpirun, a child of this shell that passes SIGUSR1/2 on to its ranks itself).
jsc_requeue_setup() {  # SIGNAL MAX scancel|kill
    export REQUEUE_SIGNAL=$1 TORCHRUN_JSC_FORWARD_SIGNALS=$1
    export REQUEUE_MARKER="$PWD/.requeue/$SLURM_JOB_ID.stopped"
    mkdir -p -- "$PWD/.requeue"
    rm -f -- "$REQUEUE_MARKER"
    # Slurm counts requeues in SLURM_RESTART_COUNT, psslurm (JSC) in SLURM_JOB_RESTART_COUNT.
    restart_count="${SLURM_RESTART_COUNT:-${SLURM_JOB_RESTART_COUNT:-0}}"
    jsc_requeue_max=$2
    echo "job ${SLURM_JOB_ID}: attempt $((restart_count + 1)), requeued at most $2 times"
    launch_pid=""
    jsc_requeue_signalled=0
    jsc_requeue_pass_on=$3
    # shellcheck disable=SC2064  # the signal's name, now
    trap "jsc_on_requeue_signal $1" "$1"
}

jsc_on_requeue_signal() {  # SIGNAL
    jsc_requeue_signalled=1
    echo "job ${SLURM_JOB_ID}: SIG$1 at $(jsc_now), passed on to every rank"
    if [ -z "$launch_pid" ]; then return; fi
    if [ "$jsc_requeue_pass_on" = kill ]; then
        kill -s "$1" "$launch_pid" 2>/dev/null || true
    else
        scancel "--signal=$1" "$SLURM_JOB_ID" || true
    fi
}

# After the launch: finished (exit 0, no marker), failed (its status, never requeued), or
# checkpointed: requeued while the restart count < MAX, else exit 75 with the way to resume.
# A preemption (PreemptTime set) on a partition that requeues preempted jobs is left to Slurm
# (a requeue of our own on top made Slurm 24.11 requeue it once more after the next attempt
# had finished, lab job 12).
jsc_requeue_verdict() {  # SIGNAL MAX
    local job_info slurm_requeues="" preempt_mode jobscript signum
    job_info=$(scontrol show job "$SLURM_JOB_ID" 2>/dev/null) || job_info=""
    case $job_info in
        *" PreemptTime=None"*|"") ;;
        *" PreemptTime="*)
            preempt_mode=$(scontrol show partition "${SLURM_JOB_PARTITION:-}" 2>/dev/null |
                sed -n 's/.*PreemptMode=\([^ ]*\).*/\1/p') || preempt_mode=""
            case $preempt_mode in *REQUEUE*) slurm_requeues="PreemptMode=$preempt_mode" ;; esac ;;
    esac
    signum=$(kill -l "$1")
    if [ "$jsc_requeue_signalled" = 1 ] && [ "$launch_rc" -eq $((128 + signum)) ]; then
        # Ranks that had no handler yet (still starting) died of the signal itself: nothing
        # was lost since the last periodic checkpoint, so resume from there.
        echo "no new checkpoint: ranks ended by SIG$1 before their handler was set" \
            >"$REQUEUE_MARKER"
        launch_rc=0
    fi
    if [ "$launch_rc" -ne 0 ] && [ -n "$slurm_requeues" ]; then
        echo "job ${SLURM_JOB_ID}: preempted, the program ended with exit $launch_rc: Slurm" \
            "requeues it ($slurm_requeues), from the last periodic checkpoint"
        exit "$launch_rc"
    fi
    if [ "$launch_rc" -ne 0 ]; then
        echo "job ${SLURM_JOB_ID}: the program failed (exit $launch_rc): not requeued" >&2
        exit "$launch_rc"
    fi
    if [ ! -e "$REQUEUE_MARKER" ]; then
        echo "job ${SLURM_JOB_ID}: finished"
        exit 0
    fi
    echo "job ${SLURM_JOB_ID}: checkpointed: $(cat -- "$REQUEUE_MARKER")"
    rm -f -- "$REQUEUE_MARKER"
    if [ -n "$slurm_requeues" ]; then
        echo "job ${SLURM_JOB_ID}: preempted: Slurm requeues it ($slurm_requeues)"
        exit 0
    fi
    if [ "$restart_count" -ge "$2" ]; then
        echo "job ${SLURM_JOB_ID}: requeued $2 times already (job.requeue.max): not again;" \
            "resubmit to go on from the checkpoint" >&2
        exit 75
    fi
    if scontrol requeue "$SLURM_JOB_ID"; then
        echo "job ${SLURM_JOB_ID}: requeued at $(jsc_now)"
    else
        # A site may refuse requeues (JobRequeue/partition policy, psslurm settings): the
        # checkpoint is saved, so say how to go on rather than end as if the work were done.
        jobscript=$(sed -n 's/^ *Command=//p' <<<"$job_info")
        echo "job ${SLURM_JOB_ID}: scontrol requeue was refused: the checkpoint is saved; resume" \
            "with: sbatch ${jobscript:-this jobscript}" >&2
        exit 75
    fi
}

# --- Spare nodes (job.spare_nodes; launcher/node/spares.py, docs/guide/spare-nodes.md) -------
# The first TRAIN nodes of the allocation train (the first of them is this one, the batch host:
# it runs the rendezvous store and the supervisor), the others wait: nothing runs there until
# one takes the place of a lost node. ntrain: torchrun's --nnodes (the world stays this size);
# nnodes stays the allocation's, so that the per-node set-up reaches the spares too.
# jsc_retired_file: where the supervisor notes each node it retires, for the later steps over
# the allocation (jsc_live; launcher/node/retired.py: why a file, and this one), removed at exit.
jsc_spare_nodes() {  # TRAIN
    local count
    count=$(grep -c . <<<"$hostnames")
    if [ "$count" -le "$1" ]; then
        echo "jsc-compose: the allocation has $count nodes, job.spare_nodes needs more than" \
            "the $1 that train" >&2
        return 1
    fi
    ntrain=$1
    train_nodes=$(head -n "$1" <<<"$hostnames" | paste -sd, -)
    spare_nodes=$(tail -n +"$(($1 + 1))" <<<"$hostnames" | paste -sd, -)
    echo "job ${SLURM_JOB_ID}: training on ${train_nodes//,/ }; waiting as spares:" \
        "${spare_nodes//,/ }"
    if jsc_retired_file=$(mktemp \
        "${TMPDIR:-/tmp}/torchrun-jsc-retired-$SLURM_JOB_ID.XXXXXXXX"); then
        trap jsc_on_exit EXIT
    else
        jsc_retired_file=""
        echo "jsc-compose: no file for the nodes replaced in ${TMPDIR:-/tmp} (above): the" \
            "steps after a loss (unstaging, stacks) run on every node, the lost one too" >&2
    fi
}

# The launch with spares: one srun step per training node (SRUN... without a node list; the
# supervisor names each node). Each step's task starts with the node's heartbeat (spares beat,
# in the step: ending the step through Slurm ends it too), keyed by a secret the supervisor
# draws and hands over in the environment. A node silent for TIMEOUT s (job.heartbeat_timeout)
# is replaced by a spare after Slurm was asked about it (launcher/node/spares.py); with
# launch.hang_action replace (jsc_watch_args) the supervisor runs the progress deadline too.
# Where the batch host is lost (Slurm keeps a --no-kill job without its script running until
# its time limit), the nodes end the job: requeue it where job.requeue has requeues left.
jsc_spares_launch() {  # TIMEOUT SRUN...
    TORCHRUN_JSC_HOST_LOST=cancel
    if [ -n "${REQUEUE_MARKER:-}" ] && [ "${restart_count:-0}" -lt "${jsc_requeue_max:-0}" ]; then
        TORCHRUN_JSC_HOST_LOST=requeue
    fi
    export TORCHRUN_JSC_HOST_LOST
    TORCHRUN_JSC_RETIRED=${jsc_retired_file:-} python3 -I "$kit/node/run.py" spares run \
        "$SLURM_JOB_ID" "$1" "$rdzv_host" "$train_nodes" "$spare_nodes" \
        ${jsc_watch_args[@]+"${jsc_watch_args[@]}"} -- "${@:2}"
}
