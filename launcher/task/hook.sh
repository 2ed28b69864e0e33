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
fi
exec "$@"
