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

And one check of placement: a worker whose CPUs (its affinity, as Slurm bound it) are all in
other NUMA domains than its GPU prints one warning line (every copy between host and GPU then
crosses the link between domains: between sockets, or inside one on AMD EPYC nodes with four
domains per socket). The GPU's CPUs come from sysfs through its PCI address, as torch.numa
finds them; the domains of CPUs from sysfs too (devices/system/node), and where the node
reports none, the sockets are compared instead.

NUMA nodes without CPUs: a GH200 node (JUPITER) shows 36, 0-3 the Grace sockets, 4/12/20/28
the GPUs' HBM, the rest empty; a GPU there can name a memory-only node (its PCI ``numa_node``;
NVML does the same, vllm-project/vllm#39361, NVIDIA/mlperf-common#16) and have no
``local_cpulist``. Such a node stands for the nearest node that has CPUs, by the kernel's
distance table (``nearest_cpu_node``), here and in torchrun_jsc's ``--numa-binding``.
"""

from __future__ import annotations

import glob
import os
import sys
from typing import Any, Callable, Dict, Iterable, Mapping, Optional, Sequence, Set

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


def parse_cpulist(text: str) -> Set[int]:
    """The kernel's CPU list format ("0-3,8,10-11") as a set; empty when it is not one."""
    cpus: Set[int] = set()
    for part in text.strip().split(","):
        low, _, high = part.partition("-")
        if not low.isdigit() or not (high or low).isdigit():
            return set()
        cpus.update(range(int(low), int(high or low) + 1))
    return cpus


def cpu_ranges(cpus: Iterable[int]) -> str:
    """{0, 1, 2, 5} -> "0-2,5" (the kernel's format); "" for none."""
    out, ordered = [], sorted(cpus)
    if not ordered:
        return ""
    start = prev = ordered[0]
    for cpu in ordered[1:] + [None]:
        if cpu is not None and cpu == prev + 1:
            prev = cpu
            continue
        out.append(str(start) if start == prev else f"{start}-{prev}")
        if cpu is not None:
            start = prev = cpu
    return ",".join(out)


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def node_cpus(node: int, sysfs: str = "/sys") -> Set[int]:
    """The CPUs of NUMA node ``node`` (empty for a memory-only node or an unknown one)."""
    return parse_cpulist(_read(os.path.join(sysfs, f"devices/system/node/node{node}/cpulist")))


def _node_ids(sysfs: str) -> list:
    """The NUMA node ids in the order of the kernel's distance rows (ascending)."""
    online = parse_cpulist(_read(os.path.join(sysfs, "devices/system/node/online")))
    if online:
        return sorted(online)
    found = (os.path.basename(p)[len("node"):] for p in
             glob.glob(os.path.join(sysfs, "devices/system/node/node[0-9]*")))
    return sorted(int(n) for n in found if n.isdigit())


def nearest_cpu_node(node: int, sysfs: str = "/sys") -> Optional[int]:
    """``node`` when it has CPUs, else the node with CPUs nearest to it by the kernel's
    distance table (nodeN/distance; the lower id on a tie); None when nothing says."""
    if node_cpus(node, sysfs):
        return node
    row = _read(os.path.join(sysfs, f"devices/system/node/node{node}/distance")).split()
    ids = _node_ids(sysfs)
    if not row or len(row) != len(ids) or not all(d.isdigit() for d in row):
        return None
    near = sorted((int(d), i) for d, i in zip(row, ids) if i != node and node_cpus(i, sysfs))
    return near[0][1] if near else None


def pci_address(props: Any) -> Optional[str]:
    """A GPU's PCI address as sysfs names it ("0000:07:00.0"), None without the fields."""
    try:
        return "%04x:%02x:%02x.0" % (props.pci_domain_id, props.pci_bus_id, props.pci_device_id)
    except (AttributeError, TypeError):
        return None


def gpu_cpus(props: Any, sysfs: str = "/sys") -> Set[int]:
    """The CPUs local to a GPU (its PCI device's local_cpulist; without one, the CPUs of its
    numa_node, or of the nearest node with CPUs when that holds memory only, as on GH200);
    empty when unknown (a torch without the PCI fields, no sysfs)."""
    addr = pci_address(props)
    if addr is None:
        return set()
    dev = os.path.join(sysfs, "bus/pci/devices", addr)
    near = parse_cpulist(_read(os.path.join(dev, "local_cpulist")))
    if near:
        return near
    node = _read(os.path.join(dev, "numa_node")).strip()
    if not node.isdigit():  # -1: the kernel does not know
        return set()
    cpu_node = nearest_cpu_node(int(node), sysfs)
    return node_cpus(cpu_node, sysfs) if cpu_node is not None else set()


def sockets(cpus: Iterable[int], sysfs: str = "/sys") -> Set[int]:
    """The sockets (physical package ids) of these CPUs; unknown CPUs are left out."""
    out = set()
    for cpu in cpus:
        text = _read(os.path.join(sysfs, f"devices/system/cpu/cpu{cpu}/topology/"
                                         "physical_package_id")).strip()
        if text.lstrip("-").isdigit():
            out.add(int(text))
    return out


def numa_nodes(cpus: Iterable[int], sysfs: str = "/sys") -> Set[int]:
    """The NUMA domains of these CPUs (devices/system/node/nodeN/cpulist, else the cpuN/nodeM
    links); empty where the node reports none. Unknown CPUs are left out."""
    table: Dict[int, int] = {}
    for path in glob.glob(os.path.join(sysfs, "devices/system/node/node[0-9]*")):
        node = os.path.basename(path)[len("node"):]
        if node.isdigit():
            table.update(dict.fromkeys(parse_cpulist(_read(os.path.join(path, "cpulist"))),
                                       int(node)))
    if table:
        return {table[cpu] for cpu in cpus if cpu in table}
    out: Set[int] = set()
    for cpu in cpus:
        for link in glob.glob(os.path.join(sysfs, f"devices/system/cpu/cpu{cpu}/node[0-9]*")):
            node = os.path.basename(link)[len("node"):]
            if node.isdigit():
                out.add(int(node))
    return out


def _where(domains: Set[int], socks: Set[int]) -> str:
    """'NUMA domain 1, socket 0' (either part left out when unknown)."""
    parts = [f"NUMA domain {cpu_ranges(domains)}"] if domains else []
    return ", ".join(parts + ([f"socket {cpu_ranges(socks)}"] if socks else []))


def placement_warning(index: int, near: Set[int], allowed: Set[int], env: Mapping[str, str],
                      sysfs: str = "/sys") -> Optional[str]:
    """One line when none of this worker's CPUs is in a NUMA domain of its GPU (where the node
    reports no domains: on its socket), else None."""
    if not near or not allowed or allowed & near:
        return None
    gpu_domains, own_domains = numa_nodes(near, sysfs), numa_nodes(allowed, sysfs)
    gpu_sockets, own = sockets(near, sysfs), sockets(allowed, sysfs)
    if gpu_domains and own_domains:
        if gpu_domains & own_domains:
            return None
    else:  # no NUMA facts: the sockets decide
        gpu_domains = own_domains = set()
        if not gpu_sockets or not own or gpu_sockets & own:
            return None
    crosses = "sockets" if gpu_sockets and own and not gpu_sockets & own else "NUMA domains"
    return (f"warning: rank {env.get('RANK', '?')} (LOCAL_RANK {env.get('LOCAL_RANK', '0')}) "
            f"runs on CPUs {cpu_ranges(allowed)} ({_where(own_domains, own)}) but its GPU "
            f"cuda:{index} is attached to CPUs {cpu_ranges(near)} "
            f"({_where(gpu_domains, gpu_sockets)}): every copy between host and GPU crosses "
            f"{crosses} (docs/guide/launch-modes.md, GPU placement)")


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def select_device(torch: Any, env: Optional[Mapping[str, str]] = None, sysfs: str = "/sys",
                  allowed: Optional[Set[int]] = None,
                  warn: Callable[[str], None] = _stderr) -> Any:
    """The worker's torch.device by the rule above; SystemExit (one line) when it cannot.
    ``allowed``: the worker's CPUs (default: its affinity); ``warn`` gets the placement line."""
    env = os.environ if env is None else env
    if torch.cuda.is_available():
        index = device_index(torch.cuda.device_count(), int(env.get("LOCAL_RANK", "0") or 0))
        try:
            near = gpu_cpus(torch.cuda.get_device_properties(index), sysfs)
        except Exception:  # noqa: BLE001 - a placement check never stops a worker
            near = set()
        if allowed is None and hasattr(os, "sched_getaffinity"):
            allowed = set(os.sched_getaffinity(0))
        try:
            why = placement_warning(index, near, allowed or set(), env, sysfs)
        except Exception:  # noqa: BLE001 - nor does a sysfs that reads oddly
            why = None
        if why:
            warn(why)
        return torch.device("cuda", index)
    why = cpu_refusal(env, getattr(torch.version, "cuda", None), glob.glob("/dev/nvidia[0-9]*"))
    if why:
        raise SystemExit(why)
    return torch.device("cpu")


__all__ = ["cpu_ranges", "cpu_refusal", "device_index", "gpu_cpus", "nearest_cpu_node",
           "node_cpus", "numa_nodes", "parse_cpulist", "pci_address", "placement_warning",
           "requested", "select_device", "sockets"]
