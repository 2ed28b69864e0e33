"""Checked Horovod allreduce and one DistributedOptimizer step, run by horovod.def's %test.

Each rank contributes rank + 1 (sum n(n+1)/2); after one optimizer step on rank-specific
data the parameters must be identical on every rank. Rank 0 prints one line
`HOROVOD_OK size=N sum=S controller=mpi|gloo params_identical=True`.
"""
import sys

import horovod.torch as hvd
import torch


def main() -> int:
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    total = hvd.allreduce(torch.tensor([float(rank + 1)]), op=hvd.Sum).item()
    expected = size * (size + 1) / 2

    torch.manual_seed(rank)  # different initial weights: broadcast must fix that
    model = torch.nn.Linear(4, 1)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    loss = model(torch.full((8, 4), float(rank))).pow(2).mean()
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
              f"params_identical={identical}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
