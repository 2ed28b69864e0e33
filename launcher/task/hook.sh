# sh "$kit/task/hook.sh" ARGV...: every task of a launch starts through this, where the task
# runs (in its container, after the runtime set the image's environment): the kit's stack hook
# (hook/sitecustomize.py, docs/guide/hangs.md) first on the PYTHONPATH found there, which stays
# after it (an image's own PYTHONPATH included); then ARGV, exec'ed. POSIX sh.
PYTHONPATH="${0%/*}/hook${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONPATH
# Site profile cray-ex (TORCHRUN_JSC_OFI_NCCL=1): NCCL over Slingshot needs the libfabric
# plugin (aws-ofi-nccl, libnccl-net*.so) where NCCL looks for it. Found: NCCL_NET names it,
# so a plugin that cannot load fails loudly instead of NCCL falling back to TCP. Not found:
# node 0's first task says so in one line. A NCCL_NET or NCCL_NET_PLUGIN you set is kept.
if [ "${TORCHRUN_JSC_OFI_NCCL:-}" = 1 ] && [ -z "${NCCL_NET:-}${NCCL_NET_PLUGIN:-}" ]; then
    jsc_plugin=""
    jsc_ifs=$IFS
    IFS=:
    for jsc_dir in ${LD_LIBRARY_PATH:-} /usr/local/lib /usr/lib64 /usr/lib /usr/lib/x86_64-linux-gnu \
        /usr/lib/aarch64-linux-gnu /opt/aws-ofi-nccl/lib /opt/amazon/ofi-nccl/lib; do
        for jsc_lib in "$jsc_dir"/libnccl-net*.so; do
            if [ -z "$jsc_plugin" ] && [ -e "$jsc_lib" ]; then jsc_plugin=$jsc_lib; fi
        done
    done
    IFS=$jsc_ifs
    if [ -n "$jsc_plugin" ]; then
        NCCL_NET="AWS Libfabric"
        export NCCL_NET
    elif [ "${SLURM_NODEID:-0}" = 0 ] && [ "${SLURM_LOCALID:-0}" = 0 ]; then
        echo "torchrun-jsc: no NCCL libfabric plugin (libnccl-net*.so, aws-ofi-nccl) in this" \
            "image: NCCL between nodes runs over TCP sockets, far slower than Slingshot; use an" \
            "image with it or bind the site's (docs/guide/specs.md#sites)" >&2
    fi
    unset jsc_plugin jsc_ifs jsc_dir jsc_lib
fi
exec "$@"
