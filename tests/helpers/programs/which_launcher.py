"""Lab program for images the kit did not build (tests/lab/test_foreign_image.py): one
all_reduce over env://, then rank 0 prints one line

    FOREIGN_SUMMARY {"world_size", "sum", "ok", "launcher", "pythonpath", "hooked", "hosts",
                     "machines", "kit_api", "device", "handled"}

``launcher``: the file the program's own `import launcher` loads (the image's, never the
kit's); ``pythonpath``: the program's PYTHONPATH; ``hooked``: the kit's stack hook is armed in
this process; ``machines``: the CPU architectures the ranks ran as (platform.machine());
``kit_api``: the file ``import torchrun_jsc_kit`` loads (the kit's, in an image without it),
``device``: its select_device(torch). With --stop, every rank installs a plain handler of its
own for $REQUEUE_SIGNAL (no kit API), rank 0 prints FOREIGN_READY once all have, and each rank
waits (at most 120 s) for the signal; ``handled``: per rank, the signals its handler saw. With
--hang, every rank then blocks in a second all_reduce that rank 0 never
joins (for the stack report).
"""

import json
import os
import platform
import signal
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
    import torchrun_jsc_kit

    torchrun_jsc_kit.progress()
    device = torchrun_jsc_kit.select_device(torch)
    got = []
    if "--stop" in sys.argv[1:]:
        sig = getattr(signal, "SIG" + os.environ["REQUEUE_SIGNAL"])
        signal.signal(sig, lambda signum, _frame: got.append(signal.Signals(signum).name))
        dist.barrier()
        if rank == 0:
            print("FOREIGN_READY", flush=True)
        deadline = time.monotonic() + 120
        while not got and time.monotonic() < deadline:
            time.sleep(0.1)  # the program's own loop; the handler runs between two steps
    handled = [None] * world
    dist.all_gather_object(handled, got)
    expected = world * (world + 1) / 2
    if rank == 0:
        print("FOREIGN_SUMMARY " + json.dumps({
            "world_size": world, "sum": t.item(), "ok": t.item() == expected,
            "launcher": own, "pythonpath": os.environ.get("PYTHONPATH", ""),
            "hooked": "jsc_stacks_hook" in sys.modules,
            "hosts": sorted(set(hosts)), "machines": sorted(set(machines)),
            "kit_api": torchrun_jsc_kit.__file__, "device": str(device),
            "handled": handled}), flush=True)
    if "--hang" in sys.argv[1:]:
        if rank != 0:
            dist.all_reduce(torch.tensor([1.0]))
        else:
            time.sleep(3600)
    dist.destroy_process_group()
    return 0 if t.item() == expected else 1


if __name__ == "__main__":
    sys.exit(main())
