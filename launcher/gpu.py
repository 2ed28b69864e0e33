"""Which device a worker uses: one rule for the examples (and any training script).

Where it sits: in the program, after the launch (examples/ddp_train.py, distributed_sum.py,
submitit_sum.py import it; the kit is installed in its images). Standard library only; torch
is passed in, so the rule is testable without it.

- One visible GPU: ``cuda:0``. psslurm (JSC) binds each task of a multi-task step to the one
  GPU closest to its cores, so ``cuda:LOCAL_RANK`` would be an invalid ordinal for every rank
  but the first.
- Several: ``cuda:LOCAL_RANK`` (torchrun's workers, or srun tasks that see the node's GPUs); a
  LOCAL_RANK beyond them is an error, never a second rank on the same GPU.
- None, but GPUs were requested (Slurm says so) and the node has NVIDIA device files or torch
  is a CUDA build: one line and exit, never a silent fall-back to CPU (Enroot/pyxis without
  the `compute` driver capability, Apptainer without --nv). Without device files and with a
  CPU-only torch (a laptop, the project's lab with its fake GPUs) the CPU is the device.
"""

from __future__ import annotations

import glob
import os
from typing import Any, Mapping, Optional, Sequence

GPU_VARS = ("CUDA_VISIBLE_DEVICES", "SLURM_GPUS_ON_NODE", "SLURM_JOB_GPUS", "SLURM_STEP_GPUS")
_NONE = ("", "void", "none", "NoDevFiles")  # and a count of 0 (SLURM_GPUS_ON_NODE)


def requested(env: Mapping[str, str]) -> Optional[str]:
    """``NAME=VALUE`` of the first variable saying that this task was given GPUs, or None."""
    for name in GPU_VARS:
        value = env.get(name, "").strip()
        if value not in _NONE and not (name == "SLURM_GPUS_ON_NODE" and value == "0"):
            return f"{name}={value}"
    return None


def device_index(visible: int, local_rank: int) -> int:
    """The CUDA ordinal of this worker among ``visible`` GPUs (>= 1)."""
    if visible == 1:
        return 0
    if not 0 <= local_rank < visible:
        raise SystemExit(f"LOCAL_RANK={local_rank} but this task sees {visible} GPUs: one GPU "
                         "per worker needs as many visible GPUs as workers on the node")
    return local_rank


def cpu_refusal(env: Mapping[str, str], cuda_build: Optional[str],
                device_files: Sequence[str]) -> Optional[str]:
    """Why running on CPU would be wrong here (one line), or None when the CPU is fine."""
    given = requested(env)
    if given is None or not (cuda_build or device_files):
        return None
    build = f"torch built for CUDA {cuda_build}" if cuda_build else "a CPU-only torch"
    return (f"GPUs were requested ({given}) but torch.cuda.is_available() is False ({build}, "
            f"{len(device_files)} /dev/nvidia* device files): not falling back to CPU; the "
            "container lacks the driver's CUDA library (Enroot/pyxis: NVIDIA_DRIVER_CAPABILITIES "
            "needs compute; Apptainer: --nv) or torch is a CPU-only build")


def select_device(torch: Any, env: Optional[Mapping[str, str]] = None) -> Any:
    """The worker's torch.device by the rule above; SystemExit (one line) when it cannot."""
    env = os.environ if env is None else env
    if torch.cuda.is_available():
        index = device_index(torch.cuda.device_count(), int(env.get("LOCAL_RANK", "0") or 0))
        return torch.device("cuda", index)
    why = cpu_refusal(env, getattr(torch.version, "cuda", None), glob.glob("/dev/nvidia[0-9]*"))
    if why:
        raise SystemExit(why)
    return torch.device("cpu")


__all__ = ["cpu_refusal", "device_index", "requested", "select_device"]
