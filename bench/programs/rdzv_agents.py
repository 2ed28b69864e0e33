"""Bench program for the rendezvous section: torch's c10d dynamic rendezvous (what torchrun and
torchrun_jsc run) for many agents, as threads, against a store in another process.

    python rdzv_agents.py store PORT               # the store host: a TCPStore server; prints
                                                   # `STORE pid=P` and runs until stdin closes
    python rdzv_agents.py agents PORT N FIRST COUNT START [TIMEOUT]
        # agents FIRST..FIRST+COUNT-1 of N, each with its own handler and store connection
        # (as one torchrun agent per node has), all joining at epoch START; one line each:
        # `JOINED agent=I rank=R t0=EPOCH t1=EPOCH cpu=S` (cpu: this process's, from torch
        # imported to the end)

The handlers are made by torch's own create_handler with the c10d backend, is_host=false
(the store is the other process), min = max = N nodes: the same code path as
`torchrun --rdzv_backend=c10d --nnodes=N`, without the workers.
"""

import os
import resource
import sys
import threading
import time
from datetime import timedelta


def store(port: int) -> int:
    from torch.distributed import TCPStore

    s = TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False,
                 timeout=timedelta(seconds=900))
    print(f"STORE pid={os.getpid()}", flush=True)
    sys.stdin.read()
    del s
    return 0


def agents(port: int, n: int, first: int, count: int, start: float, timeout: int) -> int:
    from torch.distributed.elastic.rendezvous import RendezvousParameters
    from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import create_backend
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import create_handler

    ru = resource.getrusage(resource.RUSAGE_SELF)
    cpu0 = ru.ru_utime + ru.ru_stime  # torch imported: what follows is the rendezvous's
    lines, handlers = [], []
    for i in range(first, first + count):
        params = RendezvousParameters(backend="c10d", endpoint=f"127.0.0.1:{port}",
                                      run_id="bench", min_nodes=n, max_nodes=n,
                                      local_addr="127.0.0.1", is_host="false",
                                      join_timeout=str(timeout), read_timeout=str(timeout))
        backend, st = create_backend(params)
        handlers.append((i, create_handler(st, backend, params)))

    def join(i, handler):
        delay = start - time.time()
        if delay > 0:
            time.sleep(delay)
        t0 = time.time()
        info = handler.next_rendezvous()
        rank = info.rank if hasattr(info, "rank") else info[1]
        lines.append(f"JOINED agent={i} rank={rank} t0={t0:.6f} t1={time.time():.6f}")

    threads = [threading.Thread(target=join, args=h, daemon=True) for h in handlers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout + 60)
    ru = resource.getrusage(resource.RUSAGE_SELF)
    cpu = ru.ru_utime + ru.ru_stime - cpu0
    print("\n".join(f"{line} cpu={cpu:.3f}" for line in lines), flush=True)
    os._exit(0 if len(lines) == count else 1)  # the handlers' heartbeat threads never end


if __name__ == "__main__":
    if sys.argv[1] == "store":
        sys.exit(store(int(sys.argv[2])))
    port, n, first, count = (int(x) for x in sys.argv[2:6])
    start = float(sys.argv[6])
    sys.exit(agents(port, n, first, count, start, int(sys.argv[7]) if len(sys.argv) > 7 else 600))
