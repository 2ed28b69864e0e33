"""Hugging Face Accelerator under the composer's accelerate mode (launch.mode: accelerate):
each process puts process_index + 1 into a tensor, ``accelerator.gather`` collects them all,
and the main process prints one line

    ACCEL_SUMMARY {"num_processes": 4, "world_size_env": 4, "gathered": [1, 2, 3, 4], "ok": true,
                   "distributed_type": "MULTI_CPU", "device": "cpu:0"}

Every process exits 1 if the gathered values are not 1..n or n is not the WORLD_SIZE the
launcher started. Without ACCELERATE_USE_CPU=1 on a machine without GPUs (the composer sets
it when job.gpus_per_node is 0), `accelerate launch --multi_gpu` starts the processes, but
each Accelerator is distributed_type NO and runs alone (num_processes 1): exit 1 here.
"""

from __future__ import annotations

import json
import os
import sys


def main() -> int:
    import torch
    from accelerate import Accelerator

    accelerator = Accelerator()
    mine = torch.tensor([accelerator.process_index + 1], device=accelerator.device)
    gathered = accelerator.gather(mine).tolist()
    n = accelerator.num_processes
    # torch's agent (under accelerate launch) sets WORLD_SIZE: an Accelerator that sees
    # fewer processes runs alone, the silent failure this example exists to catch.
    launched = int(os.environ.get("WORLD_SIZE", n))
    ok = gathered == list(range(1, n + 1)) and n == launched
    if accelerator.is_main_process:
        print("ACCEL_SUMMARY " + json.dumps({
            "num_processes": n, "world_size_env": launched, "gathered": gathered, "ok": ok,
            "distributed_type": str(accelerator.distributed_type.value),
            "device": str(accelerator.device)}), flush=True)
    accelerator.wait_for_everyone()
    # gloo's threads end with the group, before the interpreter: left to exit, a process
    # aborted once ("terminate called without an active exception", CI run 9) after success
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
