"""``--numa-binding`` on nodes with memory-only NUMA nodes (GH200): bind to the nearest CPUs.

Why: torch's binding (torch.numa.binding, torch 2.9 to 2.13) takes a GPU's NUMA node from its
PCI device's ``numa_node`` and binds each worker to that node's CPUs. On a GH200 node (JUPITER)
a GPU can name its HBM's node (4, 12, 20 or 28 of 36), which has no CPUs: torch then stops with
"Must bind to a non-empty set of CPU indices" for every worker, and numactl rejects such a node
too (vllm-project/vllm#39361, NVIDIA/mlperf-common#16). The kernel's distance table says which
Grace socket is nearest; that node is what a memory-only one stands for.

Patch (private API, the agent process only, where torch computes the binding): wrap
``_get_numa_node_index_for_gpu_index`` so that a node without CPUs maps to the nearest one
with CPUs (torchrun_jsc_kit.gpu.nearest_cpu_node). Applied only with --numa-binding and only when this
torch has that function (the one check); nodes with CPUs pass through unchanged.
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import Callable, Dict, Optional

from launcher.task.hook.torchrun_jsc_kit.gpu import nearest_cpu_node

PATCHED = "_torchrun_jsc_memory_only_nodes"


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def install(binding: ModuleType, sysfs: str = "/sys",
            say: Callable[[str], None] = _stderr) -> bool:
    """Wrap ``binding._get_numa_node_index_for_gpu_index``; False when this torch has none."""
    original = getattr(binding, "_get_numa_node_index_for_gpu_index", None)
    if original is None or getattr(original, PATCHED, False):
        return False
    said: Dict[int, Optional[int]] = {}

    def numa_node_for_gpu(*, gpu_index: int) -> int:
        node = original(gpu_index=gpu_index)
        cpu_node = nearest_cpu_node(node, sysfs)
        if cpu_node is None or cpu_node == node:
            return node
        if gpu_index not in said:
            said[gpu_index] = cpu_node
            say(f"torchrun_jsc: GPU {gpu_index}'s NUMA node {node} has no CPUs (GPU memory, "
                f"as on GH200): --numa-binding uses node {cpu_node}, the nearest with CPUs")
        return cpu_node

    setattr(numa_node_for_gpu, PATCHED, True)
    binding._get_numa_node_index_for_gpu_index = numa_node_for_gpu  # type: ignore[attr-defined]
    return True
