# shellcheck shell=bash
# bash "$kit/task/accelerate-node.sh" CONFIG CPU N ARGV...: accelerate on one node, in the
# container (or bare): ARGV's first N words are the launcher, the rest the program; the
# per-node options go between them, expanded here (--machine_rank from SLURM_NODEID).
# CONFIG "": a per-job file on this node. CPU 1: ACCELERATE_USE_CPU=1.
config=$1 cpu=$2 n=$3
shift 3
if [ -z "$config" ]; then
    config=$(mktemp "${TMPDIR:-/tmp}/accelerate-config.XXXXXX") || exit 1
    remove_config() { rm -f -- "$config"; }
    trap remove_config EXIT
    echo "compute_environment: LOCAL_MACHINE" >"$config"
    echo "distributed_type: MULTI_GPU" >>"$config"
fi
if [ "$cpu" = 1 ]; then export ACCELERATE_USE_CPU=1; fi
"${@:1:n}" --config_file "$config" --machine_rank "$SLURM_NODEID" "${@:n+1}"
