"""The rendezvous store's open files: one line instead of a silent stall (issue 36).

The node that hosts torch's c10d store (is_host: node rank 0) holds one TCP connection per
agent and, since torch 2.4 (the agent's store is shared with the workers), one per worker: at
N nodes x P processes, N x (P + 1) sockets in the agent's process. Past its open-file limit
(`ulimit -n`; Linux's default soft limit is 1024) the store cannot accept more: the agents
beyond it fail with RendezvousConnectionError ("The connection to the C10d store has failed")
or wait for the join timeout, as reported at ~75 connections in pytorch/pytorch#144856 (the
lab reproduces both with the store's limit set below the agent count:
docs/development/benchmarks.md, "Rendezvous at scale").

``check`` raises the soft limit to what the store needs where the hard limit allows (as a
user's `ulimit -n` would), and says so in one line; where the hard limit is too low it says
what will happen and what to do. Nothing on the other nodes, nothing when the limit suffices.
"""

from __future__ import annotations

from typing import Callable, Optional, Tuple

# The agent's own files beside the store's sockets: torch's libraries, logs, pipes to workers.
MARGIN = 64
UNLIMITED = -1  # resource.RLIM_INFINITY on Linux


def max_nodes(nnodes: str) -> int:
    """torchrun's --nnodes (N or MIN:MAX) -> the most nodes that may join."""
    return int(str(nnodes).split(":")[-1])


def procs(nproc_per_node: str) -> int:
    """--nproc_per_node: a number, or gpu/cpu/auto (torch counts them; 8 bounds a node's GPUs)."""
    try:
        return int(nproc_per_node)
    except (TypeError, ValueError):
        return 8


def needed(nodes: int, nproc: int) -> int:
    return nodes * (nproc + 1) + MARGIN


def check(is_host: Optional[bool], nnodes: str, nproc_per_node: str,
          getrlimit: Callable[[], Tuple[int, int]],
          setrlimit: Callable[[int, int], None]) -> Optional[str]:
    """Raise the soft open-file limit for the store where needed; the line to print, if any."""
    if not is_host:
        return None
    try:
        nodes, nproc = max_nodes(nnodes), procs(nproc_per_node)
    except ValueError:
        return None  # torch's own parser refuses it later
    need = needed(nodes, nproc)
    soft, hard = getrlimit()
    if soft == UNLIMITED or soft >= need:
        return None
    conns = f"{nodes} agents + {nodes * nproc} workers"
    if hard == UNLIMITED or hard >= need:
        setrlimit(need, hard)
        return (f"torchrun_jsc: the rendezvous store on this node takes up to {need - MARGIN} "
                f"connections ({conns}): open-file limit raised from {soft} to {need}")
    setrlimit(hard, hard)
    return (f"torchrun_jsc: warning: the rendezvous store on this node takes up to "
            f"{need - MARGIN} connections ({conns}) but this node allows {hard} open files "
            f"(ulimit -Hn): agents beyond that fail with RendezvousConnectionError or wait for "
            f"the join timeout (pytorch/pytorch#144856); ask the site for a higher limit or "
            f"start fewer nodes")
