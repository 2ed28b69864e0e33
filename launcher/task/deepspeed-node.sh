# shellcheck shell=bash
# bash "$kit/task/deepspeed-node.sh" HOSTS N ARGV...: deepspeed on one node, in the container
# (or bare): HOSTS is the hostfile's text; ARGV's first N words are the launcher, the rest the
# program; the per-node options go between them (--node_rank from SLURM_NODEID).
hosts=$1 n=$2
shift 2
hostfile=$(mktemp "${TMPDIR:-/tmp}/deepspeed-hostfile.XXXXXX") || exit 1
remove_hostfile() { rm -f -- "$hostfile"; }
trap remove_hostfile EXIT
echo "$hosts" >"$hostfile"
"${@:1:n}" --hostfile "$hostfile" --node_rank "$SLURM_NODEID" "${@:n+1}"
