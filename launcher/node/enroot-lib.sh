# shellcheck shell=bash
# The Enroot and pyxis runtimes' shared functions (sourced by enroot-setup.sh, pyxis-setup.sh,
# enroot-start.sh and the doctor's `space` check): bash on the node, per node or task.

# The data path Enroot itself uses on this node, printed: where the set-up keeps its lock and
# partial trees (enroot-setup.sh) and what the doctor's `space` cell measures
# (launcher/node/doctor/local.py). Without runtime.data_path the kit sets no ENROOT_DATA_PATH:
# the site's Enroot config decides. Enroot >= 4.0 says it: `enroot info` prints
# "  ENROOT_DATA_PATH=..." after reading its config. Older Enroot (3.x): its rule re-derived
# from NVIDIA/enroot enroot.in ("BEGIN CONFIG", the same in v3.2.0-v4.1.2;
# doc/configuration.md): a non-empty ENROOT_DATA_PATH in the environment wins; else the first
# ENROOT_DATA_PATH line of enroot.conf, then of enroot.conf.d/*.conf in glob order
# (config::export never overwrites a value already set), read with
# `IFS=$' \t=' read -r key value` and expanded with `eval echo` as Enroot does; else
# ${XDG_DATA_HOME:-$HOME/.local/share}/enroot. enroot.conf is the file Enroot's script reads
# (its `config::init "SYSCONFDIR/enroot.conf"` line; /etc/enroot/enroot.conf as packaged).
enroot_data_path() {
    local found conf file key value
    found=$(enroot info 2>/dev/null | sed -n 's/^ *ENROOT_DATA_PATH=//p') || found=
    if [ -z "$found" ]; then
        found=${ENROOT_DATA_PATH:-}
        conf=$(sed -n 's/^config::init "\(.*\)"$/\1/p' "$(command -v enroot)" 2>/dev/null) || conf=
        conf=${conf%%$'\n'*}
        for file in "${conf:=/etc/enroot/enroot.conf}" "$conf.d"/*.conf; do
            if [ -n "$found" ] || [ ! -f "$file" ]; then continue; fi
            while IFS=$' \t=' read -r key value; do
                if [ "$key" = ENROOT_DATA_PATH ] && [ -z "$found" ]; then
                    found=$(eval echo "$value" 2>/dev/null) || found=
                fi
            done <"$file"
        done
        [ -n "$found" ] || found=${XDG_DATA_HOME:-${HOME:-~}/.local/share}/enroot
    fi
    printf '%s\n' "$found"
}

# True under pyxis' container_scope=job (its plugstack configuration): pyxis then names,
# creates and removes the containers per job itself (pyxis-setup.sh, enroot-need.sh).
pyxis_job_scope() {
    local plugstack
    plugstack=$(scontrol show config 2>/dev/null | sed -n 's/^PlugStackConfig *= *//p') ||
        plugstack=""
    [ -n "$plugstack" ] && grep -rqs -- "container_scope=job" "${plugstack%/*}"
}

# The per-user cache directory (TORCHRUN_JSC_CACHE, launcher.runtimes.base.cache_lines), made
# on the node: never followed through a link or taken over from another user (a planted Triton
# kernel would run in this user's job). Enroot mounts it at its own path over the container's
# private /tmp; pyxis binds the host's /tmp itself. Sets cache ("" when unset).
jsc_cache_dir() {
    cache=${TORCHRUN_JSC_CACHE:-}
    if [ -n "$cache" ]; then
        # shellcheck disable=SC2174  # -m for the cache itself; its parents are the site's
        mkdir -p -m 700 -- "$cache"
        if [ -L "$cache" ] || [ ! -O "$cache" ]; then
            echo "TORCHRUN_JSC_CACHE=$cache on $(hostname) is a link or not this user's: set TORCHRUN_JSC_CACHE to a directory of your own" >&2
            exit 1
        fi
    fi
}
