"""Lab program for images the kit did not build (tests/lab/test_foreign_image.py): one
all_reduce over env://, then rank 0 prints one line

    FOREIGN_SUMMARY {"world_size", "sum", "ok", "launcher", "pythonpath", "hooked", "hosts",
                     "machines"}

``launcher``: the file the program's own `import launcher` loads (the image's, never the
kit's); ``pythonpath``: the program's PYTHONPATH; ``hooked``: the kit's stack hook is armed in
this process; ``machines``: the CPU architectures the ranks ran as (platform.machine()). With
--hang, every rank then blocks in a second all_reduce that rank 0 never
joins (for the stack report).
"""

import json
import os
import platform
import socket
import sys
import time

import torch
import torch.distributed as dist


def main() -> int:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    t = torch.tensor([rank + 1.0])
    dist.all_reduce(t)
    hosts = [None] * world
    dist.all_gather_object(hosts, socket.gethostname())
    machines = [None] * world
    dist.all_gather_object(machines, platform.machine())
    try:
        import launcher
        own = getattr(launcher, "__file__", None)
    except ImportError:
        own = None
    expected = world * (world + 1) / 2
    if rank == 0:
        print("FOREIGN_SUMMARY " + json.dumps({
            "world_size": world, "sum": t.item(), "ok": t.item() == expected,
            "launcher": own, "pythonpath": os.environ.get("PYTHONPATH", ""),
            "hooked": "jsc_stacks_hook" in sys.modules,
            "hosts": sorted(set(hosts)), "machines": sorted(set(machines))}), flush=True)
    if "--hang" in sys.argv[1:]:
        if rank != 0:
            dist.all_reduce(torch.tensor([1.0]))
        else:
            time.sleep(3600)
    dist.destroy_process_group()
    return 0 if t.item() == expected else 1


if __name__ == "__main__":
    sys.exit(main())
