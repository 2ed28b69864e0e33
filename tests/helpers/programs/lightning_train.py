"""Lab program: real PyTorch Lightning (CPU, DDP over gloo) with nothing of the kit in it, for
tests/lab/test_lightning.py. Lightning's own SLURM auto-requeue does the work: in srun mode it
picks SLURMEnvironment, whose SIGUSR1 handler saves ``hpc_ckpt_N.ckpt`` in --root, rank 0 calls
``scontrol requeue``, and the next attempt's ``fit`` resumes from that checkpoint. Rank 0 prints
``LIGHTNING_STEP N`` per step and ends with one line

    LIGHTNING_SUMMARY {"environment", "world_size", "start_step", "global_step", "restart",
                       "hosts"}
"""

import argparse
import json
import os
import socket
import sys
import time

import lightning as L
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset


class Model(L.LightningModule):
    def __init__(self, sleep: float) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(8, 1)
        self.sleep = sleep
        self.start_step = None

    def on_train_start(self) -> None:
        self.start_step = self.trainer.global_step  # > 0 where fit resumed a checkpoint

    def training_step(self, batch, _index):
        x, y = batch
        if self.global_rank == 0:
            print(f"LIGHTNING_STEP {self.trainer.global_step}", flush=True)
        time.sleep(self.sleep)  # the signal comes while every rank sleeps in the same step
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--sleep", type=float, default=0.3)
    p.add_argument("--root", required=True)
    args = p.parse_args()
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(8192, 8), torch.randn(8192, 1))
    trainer = L.Trainer(accelerator="cpu", devices=1, num_nodes=int(os.environ["SLURM_NNODES"]),
                        strategy="ddp", max_steps=args.steps, default_root_dir=args.root,
                        enable_progress_bar=False, enable_model_summary=False, logger=False,
                        enable_checkpointing=False)
    model = Model(args.sleep)
    trainer.fit(model, DataLoader(data, batch_size=16))
    hosts = [None] * trainer.world_size
    if dist.is_initialized():
        dist.all_gather_object(hosts, socket.gethostname())
    if trainer.global_rank == 0:
        print("LIGHTNING_SUMMARY " + json.dumps({
            "environment": type(trainer._accelerator_connector.cluster_environment).__name__,
            "world_size": trainer.world_size, "start_step": model.start_step,
            "global_step": trainer.global_step,
            "restart": os.environ.get("SLURM_RESTART_COUNT", "0"),
            "hosts": sorted(set(hosts))}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
