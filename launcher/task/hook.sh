# sh "$kit/task/hook.sh" ARGV...: every task of a launch starts through this, where the task
# runs (in its container, after the runtime set the image's environment): the kit's stack hook
# (hook/sitecustomize.py, docs/guide/hangs.md) first on the PYTHONPATH found there, which stays
# after it (an image's own PYTHONPATH included); then ARGV, exec'ed. POSIX sh.
# The job's start-up timeline (launcher/node/job.sh jsc_mark): this task's container is up.
if [ -n "${TORCHRUN_JSC_TIMELINE:-}" ]; then
    jsc_t=$(date +%s.%N 2>/dev/null) || jsc_t=""
    jsc_node=${SLURMD_NODENAME:-$(uname -n)}
    case $jsc_t in
        "" | *[!0-9.]*) ;;
        *) { printf '%s container_up pid=%s\n' "$jsc_t" "$$" \
                >>"$TORCHRUN_JSC_TIMELINE/${jsc_node%%.*}"; } 2>/dev/null || : ;;
    esac
fi
PYTHONPATH="${0%/*}/hook${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONPATH
# Site profile cray-ex (TORCHRUN_JSC_OFI_NCCL=1): NCCL's net plugin and protocols for
# Slingshot, decided here, in the task's container (nccl-net.sh says how).
if [ "${TORCHRUN_JSC_OFI_NCCL:-}" = 1 ]; then
    # shellcheck source=nccl-net.sh
    . "${0%/*}/nccl-net.sh"
elif [ -z "${NCCL_PROTO:-}" ] && [ "$(uname -m 2>/dev/null)" = aarch64 ]; then
    # Every other profile (jsc: JUPITER, JEDI) the same as nccl-net.sh's rule: on Grace
    # (GH200, GB200) the NIC writes into GPU memory over PCIe->NVLink-C2C, where LL128's
    # 128-byte ordering does not hold, whatever the fabric (NVIDIA/nccl#2053; on Slingshot
    # #2001). A NCCL_PROTO the job or image set is kept.
    NCCL_PROTO=^LL128
    export NCCL_PROTO
    if [ "${SLURM_NODEID:-0}" = 0 ] && [ "${SLURM_LOCALID:-0}" = 0 ]; then
        echo "torchrun-jsc: aarch64 (Grace): NCCL_PROTO=^LL128 (NVIDIA/nccl#2053)" >&2
    fi
fi
# env.set's PATH, LD_PRELOAD, LD_LIBRARY_PATH are for the program only
# (launcher/features/env.py TASK_ONLY): set here, after the task's command is found with the
# PATH the job's own commands use.
if [ -n "${TORCHRUN_JSC_TASK_ENV:-}" ]; then
    jsc_cmd=$(command -v -- "$1") || jsc_cmd=$1
    shift
    for jsc_n in $TORCHRUN_JSC_TASK_ENV; do
        case $jsc_n in
            PATH | LD_PRELOAD | LD_LIBRARY_PATH)
                eval "$jsc_n=\${TORCHRUN_JSC_TASK_$jsc_n-}"
                export "${jsc_n?}" ;;
        esac
    done
    set -- "$jsc_cmd" "$@"
fi
exec "$@"
