"""Checked Horovod allreduce and one DistributedOptimizer step, run by horovod.def's %test.

Each rank contributes rank + 1 (sum n(n+1)/2); after one optimizer step on rank-specific
data the parameters must be identical on every rank. Rank 0 prints one line
`HOROVOD_OK size=N sum=S controller=mpi|gloo params_identical=True`.

With `--cuda` (scripts/horovod-gpu-check.sh) every tensor and the model live on the rank's GPU,
so Horovod runs them through its NCCL operations (refused in one line when this Horovod has
no NCCL or torch sees no GPU); a 1 Mi-element allreduce is checked element by element too,
and the line ends with `device=cuda:K nccl_built=V elements=1048576`.

A rank whose MPI did not find the launcher's PMI server starts as a singleton (size 1, rank
0): N such ranks would each pass on their own. So hvd.size() must equal the number of tasks
the launcher started (expected_size), read from the environment before hvd.init() (MPI_Init
may set OMPI_COMM_WORLD_SIZE=1 itself in a singleton).
"""
import os
import sys
from typing import Mapping, Optional, Tuple

# Who set the count, most specific first: Open MPI's mpirun (under Slurm its srun step holds
# one daemon per node, so SLURM_* counts daemons, not ranks), horovodrun, then Slurm's step.
LAUNCHER_SIZES = ("OMPI_COMM_WORLD_SIZE", "HOROVOD_SIZE", "SLURM_STEP_NUM_TASKS",
                  "SLURM_NTASKS")


def expected_size(env: Mapping[str, str]) -> Optional[Tuple[str, int]]:
    """(variable, tasks the launcher started), or None when no launcher said."""
    for name in LAUNCHER_SIZES:
        text = env.get(name, "").strip()
        if text.isdigit():
            return name, int(text)
    return None


def size_mismatch(size: int, env: Mapping[str, str]) -> Optional[str]:
    """One line when hvd.size() differs from the launcher's task count, else None."""
    found = expected_size(env)
    if found is None or found[1] == size:
        return None
    name, tasks = found
    hint = " (each rank is an MPI singleton: MPI_Init found no PMI server; with srun pass the " \
        "site's --mpi plugin, e.g. pspmix under psslurm)" if size == 1 else ""
    return f"HOROVOD_FAIL hvd.size()={size} but the launcher started {tasks} tasks " \
        f"({name}={tasks}){hint}"


ELEMENTS = 1 << 20  # the --cuda allreduce: 4 MiB of float32, enough for NCCL's ring kernels


def main(argv: Optional[list] = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args not in ([], ["--cuda"]):
        print(f"HOROVOD_FAIL usage: horovod_check.py [--cuda], not {' '.join(args)}", file=sys.stderr)
        return 2
    cuda = args == ["--cuda"]
    launched = dict(os.environ)  # before MPI_Init can add to it
    import horovod.torch as hvd
    import torch

    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    mismatch = size_mismatch(size, launched)
    if mismatch:
        print(f"{mismatch} rank={rank}", file=sys.stderr)
        return 1
    device, extra = torch.device("cpu"), ""
    if cuda:
        if not hvd.nccl_built():
            print(f"HOROVOD_FAIL rank={rank} --cuda but this Horovod has no NCCL operations "
                  "(horovodrun --check-build)", file=sys.stderr)
            return 1
        if not torch.cuda.is_available():
            print(f"HOROVOD_FAIL rank={rank} --cuda but torch sees no GPU", file=sys.stderr)
            return 1
        device = torch.device("cuda", hvd.local_rank() % torch.cuda.device_count())
        torch.cuda.set_device(device)
        big = hvd.allreduce(torch.full((ELEMENTS,), float(rank + 1), device=device), op=hvd.Sum)
        want = size * (size + 1) / 2
        wrong = int((big != want).sum().item())
        if wrong or big.device != device:
            print(f"HOROVOD_FAIL rank={rank} {wrong} of {ELEMENTS} elements differ from {want:g} "
                  f"(device {big.device})", file=sys.stderr)
            return 1
        extra = f" device={device} nccl_built={hvd.nccl_built()} elements={ELEMENTS}"
    total = hvd.allreduce(torch.tensor([float(rank + 1)], device=device), op=hvd.Sum).item()
    expected = size * (size + 1) / 2

    torch.manual_seed(rank)  # different initial weights: broadcast must fix that
    model = torch.nn.Linear(4, 1).to(device)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    loss = model(torch.full((8, 4), float(rank), device=device)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    gathered = hvd.allgather(flat.unsqueeze(0))
    identical = bool((gathered == gathered[0]).all())

    controller = "mpi" if hvd.mpi_enabled() else "gloo" if hvd.gloo_enabled() else "none"
    if total != expected or not identical:
        print(f"HOROVOD_FAIL rank={rank} sum={total} expected={expected} "
              f"params_identical={identical}", file=sys.stderr)
        return 1
    if rank == 0:
        print(f"HOROVOD_OK size={size} sum={total:g} controller={controller} "
              f"params_identical={identical}{extra}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
