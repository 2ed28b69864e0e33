# shellcheck shell=bash
# bash "$kit/node/task.sh" KIND ARGV...: what each task of a launch runs first, where per-task
# values exist (never expanded at batch scope); then ARGV, exec'ed, so that it reaches the
# program unchanged (never re-parsed). Outside the container with the host's bash and python3,
# or inside it where the runtime starts the whole task there (pyxis: the kit is bound there).
# KIND:
#   srun    ranks from Slurm's per-task variables (torch's env://), then the socket interface
#   mpi     MPI ranks (Horovod): Open MPI's TCP transport and Horovod's gloo controller too
#   ifname  the socket interface only (the per-node launcher sets the ranks: accelerate, deepspeed)
# The socket interface: without torchrun_jsc nobody picks it, and gloo/NCCL/Open MPI would use
# the hostname's, which on JSC-like networks the other nodes cannot reach. Unless the user or
# the site profile set one, the interface that routes to MASTER_ADDR by the kit's one rule
# (launcher/node/net, the code torchrun_jsc runs): loopback skipped unless alone, IPv4 first
# unless only IPv6 (TORCHRUN_JSC_ADDRESS_FAMILY), NCCL's exact form =NAME, no fallback.
kind=$1
shift
case $kind in
    srun) export RANK="$SLURM_PROCID" LOCAL_RANK="$SLURM_LOCALID" WORLD_SIZE="$SLURM_NTASKS" \
        NODE_RANK="$SLURM_NODEID"; net_args=() ;;
    mpi) net_args=(--mpi) ;;
    ifname) net_args=() ;;
    *) echo "launcher/node/task.sh: KIND $kind is not one of: srun, mpi, ifname" >&2; exit 2 ;;
esac
command -v python3 >/dev/null || { echo "no python3 on ${SLURMD_NODENAME:-$HOSTNAME}: the task script needs it to pick the socket interface towards MASTER_ADDR" >&2; exit 1; }
net_env=$(python3 -I "${BASH_SOURCE[0]%/*}/run.py" net-env "${net_args[@]}" "$MASTER_ADDR") || exit 1
eval "$net_env"
unset kind net_args net_env
exec "$@"
