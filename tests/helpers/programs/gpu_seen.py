"""Lab program: what one task of a step sees of the node's GPUs, and which one the device rule
(launcher/gpu.py) gives it. No torch: the lab's GPUs are fake GRES (CUDA_VISIBLE_DEVICES only).

Prints one line per task: GPU_SEEN {"host", "local_rank", "visible", "gpu", "cpus"}, where
"gpu" is the Slurm index of the GPU the rank would use: the visible list at the rule's index.
"""

import json
import os
import socket
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
from launcher.task.hook.torchrun_jsc_kit.gpu import device_index  # noqa: E402 - the repository's

visible = [v for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v]
local_rank = int(os.environ["LOCAL_RANK"])
gpu = visible[device_index(len(visible), local_rank)] if visible else None
print("GPU_SEEN " + json.dumps({
    "host": socket.gethostname(), "local_rank": local_rank, "visible": visible, "gpu": gpu,
    "cpus": sorted(os.sched_getaffinity(0))}), flush=True)
