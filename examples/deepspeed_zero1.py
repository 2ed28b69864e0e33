"""A DeepSpeed engine with ZeRO stage 1 on CPU: what `deepspeed.initialize` needs to work
under the composer's deepspeed mode (launch.mode: deepspeed).

Each rank trains the same tiny linear model on its own synthetic batches for 10 steps
through the engine (ZeRO-1 partitions the optimizer state across ranks; gloo on CPU). Rank
0 prints one line

    ZERO1_SUMMARY {"world_size": 4, "zero_stage": 1, "params_identical": true,
                   "loss_first": ..., "loss_last": ...}

and every rank exits 1 if the parameters differ between ranks or the loss did not drop.

On CPU, deepspeed's communication backend JIT-compiles its shared-memory op
(deepspeed_shm_comm) on first use: that needs a C++ compiler where the program runs and
writes to $TORCH_EXTENSIONS_DIR (default ~/.cache/torch_extensions). An image without g++
fails in deepspeed.initialize with "ImportError: .../deepspeed_shm_comm.so: cannot open
shared object file". torch.optim.SGD is not on ZeRO's tested list, hence
zero_allow_untested_optimizer.
"""

from __future__ import annotations

import json
import sys


def main() -> int:
    import deepspeed
    import torch
    import torch.distributed as dist

    deepspeed.init_distributed(dist_backend="gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)  # the same initial parameters on every rank
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    config = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1,
              "zero_optimization": {"stage": 1}, "zero_allow_untested_optimizer": True}
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    data = torch.Generator().manual_seed(1 + rank)  # each rank its own batches
    losses = []
    for _ in range(10):
        x = torch.randn(4, 8, generator=data)
        loss = torch.nn.functional.mse_loss(engine(x), x.sum(dim=1, keepdim=True))
        engine.backward(loss)
        engine.step()
        losses.append(loss.item())
    flat = torch.cat([p.detach().flatten() for p in engine.module.parameters()])
    gathered = [torch.zeros_like(flat) for _ in range(world)]
    dist.all_gather(gathered, flat)
    same = all(torch.equal(gathered[0], t) for t in gathered)
    ok = same and losses[-1] < losses[0]
    if rank == 0:
        print("ZERO1_SUMMARY " + json.dumps({
            "world_size": world, "zero_stage": engine.zero_optimization_stage(),
            "params_identical": same, "loss_first": losses[0], "loss_last": losses[-1]}),
            flush=True)
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
