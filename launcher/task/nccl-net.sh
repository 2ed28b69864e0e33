# shellcheck shell=sh
# . "$kit/task/nccl-net.sh": sourced by hook.sh (each task, in its container, before the
# program) under site profile cray-ex (TORCHRUN_JSC_OFI_NCCL=1). POSIX sh; every name it sets
# starts with jsc_ and is unset at the end. A NCCL_NET or NCCL_PROTO the job or the image set
# is kept; node 0's first task says in one line what was found.
#
# 1. NCCL over Slingshot needs the libfabric net plugin (aws-ofi-nccl). It is looked for as
#    NCCL loads it (src/plugin/plugin_open.cc; RCCL, its ROCm fork, with librccl-net): each
#    name in NCCL_NET_PLUGIN (a comma-separated list; `none`: no plugin) as given, then,
#    unless it is a path or a lib*.so name, libnccl-net-NAME.so; without NCCL_NET_PLUGIN only
#    libnccl-net.so. A name without '/' is found where dlopen finds it: LD_LIBRARY_PATH, the
#    ld.so cache, the default directories. Found: NCCL_NET="AWS Libfabric", the name every
#    aws-ofi-nccl release answers to (1.12+ also "Libfabric" and "OFI", aws/aws-ofi-nccl#530;
#    HPE's shs-ccl-docs now write OFI, which plugins up to 1.11 reject), so that a
#    plugin that cannot load stops NCCL instead of a silent fallback to TCP sockets. A plugin
#    NCCL does not load by default (NGC's libnccl-net-aws.so, aws-ofi-nccl >= 1.15's
#    libnccl-net-ofi.so without its libnccl-net.so link) is named in the line, not chosen.
# 2. NCCL_PROTO=^LL128 on aarch64 nodes only (Grace: GH200, GB200), where LL128 from the NIC
#    into GPU memory over NVLink-C2C corrupts data (NVIDIA/nccl#2001, #2053); elsewhere
#    NCCL's own choice.

jsc_lib() {  # NAME: where the dynamic loader finds NAME (as dlopen looks), else status 1
    case $1 in */*)
        [ -e "$1" ] && printf '%s\n' "$1"
        return ;;
    esac
    jsc_ifs=$IFS
    IFS=:
    for jsc_dir in ${LD_LIBRARY_PATH:-}; do
        if [ -n "$jsc_dir" ] && [ -e "$jsc_dir/$1" ]; then
            IFS=$jsc_ifs
            printf '%s\n' "$jsc_dir/$1"
            return 0
        fi
    done
    IFS=$jsc_ifs
    jsc_cached=$(jsc_ldconfig | awk -v n="$1" '$1 == n { sub(/.* => /, ""); print; exit }' \
        2>/dev/null)  # an image without awk: no cache lookup
    if [ -n "$jsc_cached" ]; then printf '%s\n' "$jsc_cached"; return 0; fi
    for jsc_dir in /lib64 /usr/lib64 /lib /usr/lib; do
        if [ -e "$jsc_dir/$1" ]; then printf '%s\n' "$jsc_dir/$1"; return 0; fi
    done
    return 1
}

jsc_ldconfig() {  # the ld.so cache's entries (ldconfig -p), nothing where it cannot be read
    for jsc_cmd in ldconfig /sbin/ldconfig /usr/sbin/ldconfig; do
        if command -v "$jsc_cmd" >/dev/null 2>&1; then "$jsc_cmd" -p 2>/dev/null; return 0; fi
    done
}

jsc_names() {  # the library names NCCL (then RCCL) tries, one a line, in its order
    if [ -z "${NCCL_NET_PLUGIN:-}" ]; then
        printf '%s\n' libnccl-net.so librccl-net.so
        return
    fi
    jsc_ifs=$IFS
    IFS=,
    for jsc_name in $NCCL_NET_PLUGIN; do
        case $jsc_name in [Nn][Oo][Nn][Ee]|"") continue ;; esac
        printf '%s\n' "$jsc_name"
        case $jsc_name in */*|lib*.so) ;; *)
            printf '%s\n' "libnccl-net-$jsc_name.so" "librccl-net-$jsc_name.so" ;;
        esac
    done
    IFS=$jsc_ifs
}

jsc_unloaded() {  # plugins NCCL does not load by default: their paths, ", "-separated
    {
        jsc_ldconfig | awk '$1 ~ /^lib[nr]ccl-net-.*\.so$/ { sub(/.* => /, ""); print }' \
            2>/dev/null
        jsc_ifs=$IFS
        IFS=:
        for jsc_dir in ${LD_LIBRARY_PATH:-} /lib64 /usr/lib64 /lib /usr/lib; do
            for jsc_file in "$jsc_dir"/libnccl-net-*.so "$jsc_dir"/librccl-net-*.so; do
                if [ -n "$jsc_dir" ] && [ -e "$jsc_file" ]; then printf '%s\n' "$jsc_file"; fi
            done
        done
        IFS=$jsc_ifs
    } | awk '!seen[$0]++ { printf "%s%s", (n++ ? ", " : ""), $0 }' 2>/dev/null
}

jsc_said=""
if [ -z "${NCCL_NET:-}" ]; then
    jsc_tried=""
    jsc_plugin=""
    jsc_ifs=$IFS
    IFS='
'  # one name a line: a path may hold spaces
    for jsc_name in $(jsc_names); do
        IFS=$jsc_ifs
        jsc_tried="$jsc_tried${jsc_tried:+, }$jsc_name"
        if jsc_plugin=$(jsc_lib "$jsc_name"); then break; fi
        jsc_plugin=""
    done
    IFS=$jsc_ifs
    jsc_how="NCCL's default name"
    if [ -n "${NCCL_NET_PLUGIN:-}" ]; then jsc_how="NCCL_NET_PLUGIN=$NCCL_NET_PLUGIN"; fi
    if [ -n "$jsc_plugin" ]; then
        NCCL_NET="AWS Libfabric"
        export NCCL_NET
        jsc_said="NCCL net plugin $jsc_plugin ($jsc_how): NCCL_NET=\"AWS Libfabric\""
    else
        jsc_others=""
        if [ -z "${NCCL_NET_PLUGIN:-}" ]; then jsc_others=$(jsc_unloaded); fi
        if [ -n "$jsc_others" ]; then
            jsc_suffix=${jsc_others%%, *}
            jsc_suffix=${jsc_suffix##*/lib[nr]ccl-net-}
            jsc_said="no NCCL net plugin NCCL loads by default ($jsc_tried), but $jsc_others"
            jsc_said="$jsc_said (NCCL_NET_PLUGIN=${jsc_suffix%.so} in env.set loads it)"
        elif [ -z "$jsc_tried" ]; then
            jsc_said="no NCCL net plugin (NCCL_NET_PLUGIN=$NCCL_NET_PLUGIN)"
        else
            jsc_said="no NCCL net plugin (aws-ofi-nccl; tried $jsc_tried)"
        fi
        jsc_said="$jsc_said: NCCL between nodes runs over TCP sockets, far slower than"
        jsc_said="$jsc_said Slingshot (docs/guide/specs.md#sites)"
    fi
fi
if [ -z "${NCCL_PROTO:-}" ] && [ "$(uname -m 2>/dev/null)" = aarch64 ]; then
    NCCL_PROTO=^LL128
    export NCCL_PROTO
    jsc_said="$jsc_said${jsc_said:+; }aarch64 (Grace): NCCL_PROTO=^LL128 (NVIDIA/nccl#2001)"
fi
if [ -n "$jsc_said" ] && [ "${SLURM_NODEID:-0}" = 0 ] && [ "${SLURM_LOCALID:-0}" = 0 ]; then
    echo "torchrun-jsc: $jsc_said" >&2
fi
unset -f jsc_lib jsc_ldconfig jsc_names jsc_unloaded
unset jsc_said jsc_tried jsc_plugin jsc_how jsc_others jsc_suffix jsc_name jsc_dir jsc_file \
    jsc_ifs jsc_cached jsc_cmd
