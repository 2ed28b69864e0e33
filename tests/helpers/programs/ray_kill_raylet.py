"""Ray driver for the failure test: a task on another node SIGKILLs that node's raylet (its
parent process), then the driver waits; the job must end through the kit's teardown, fast."""

import os
import signal
import sys
import time

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy


@ray.remote(num_cpus=1)
def kill_parent() -> str:
    with open(f"/proc/{os.getppid()}/comm") as f:
        name = f.read().strip()
    print(f"KILLING {name} pid {os.getppid()} at {time.time():.3f}", flush=True)
    os.kill(os.getppid(), signal.SIGKILL)
    return name


ray.init()
own = ray.get_runtime_context().get_node_id()
other = next(n for n in ray.nodes() if n["Alive"] and n["NodeID"] != own)
print(f"KILL_RAYLET_ON {other['NodeName']} at {time.time():.3f}", flush=True)
ref = kill_parent.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
    other["NodeID"], soft=False), max_retries=0).remote()
try:
    ray.get(ref, timeout=600)
except Exception as e:  # the node is gone: the task fails; wait for the teardown anyway
    print(f"task failed: {type(e).__name__}", flush=True)
time.sleep(600)
sys.exit(0)
