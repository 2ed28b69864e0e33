"""Ring 1: CPU placement and `launch.numa_binding` on a GH200 node (JUPITER Booster), whose NUMA
list includes nodes without CPUs, on a faked sysfs tree (fake_gh200).

A GH200 node shows 36 NUMA nodes: 0-3 the Grace sockets (72 cores each), 4/12/20/28 the GPUs'
HBM, the rest empty. A GPU's PCI device can name its HBM node, which has no CPUs, and have no
local_cpulist; torch's --numa-binding then finds no CPUs to bind to ("Must bind to a non-empty
set of CPU indices") and numactl rejects the node. The kit maps such a node to the nearest node
with CPUs by the kernel's distance table: the device rule's placement check (launcher/gpu.py)
and torchrun_jsc's patch of torch's binding (launcher/task/torchrun_jsc/numa.py), the latter also
run through torch's own binding code where torch is importable.
"""

from __future__ import annotations

import types
from pathlib import Path
from types import SimpleNamespace

import pytest

from launcher.task.hook.torchrun_jsc_kit import gpu
from launcher.task.torchrun_jsc import numa

CORES, SOCKETS, NODES = 72, 4, 36
HBM = {i: 4 + 8 * i for i in range(4)}  # GPU i's memory-only NUMA node


def fake_gh200(root: Path, local_cpulist: bool = False) -> str:
    """A GH200 node's sysfs: 4 x 72 CPUs in nodes 0-3, HBM nodes 4/12/20/28, the rest empty;
    GPU i (PCI 00X9:01:00.0) names node HBM[i]; ``local_cpulist``: whether its PCI device also
    lists its CPUs (empty otherwise, as for a device on a memory-only node)."""
    base = root / "devices/system/node"
    base.mkdir(parents=True)
    (base / "online").write_text(f"0-{NODES - 1}\n")
    hbm_of = {h: i for i, h in HBM.items()}
    for n in range(NODES):
        d = base / f"node{n}"
        d.mkdir()
        cpus = gpu.cpu_ranges(range(n * CORES, (n + 1) * CORES)) if n < SOCKETS else ""
        (d / "cpulist").write_text(cpus + "\n")
        row = []
        for m in range(NODES):
            if m == n:
                row.append(10)
            elif n < SOCKETS and m < SOCKETS:
                row.append(40)
            elif n in hbm_of and m < SOCKETS:
                row.append(80 if m == hbm_of[n] else 120)
            elif m in hbm_of and n < SOCKETS:
                row.append(80 if n == hbm_of[m] else 120)
            else:
                row.append(255)
        (d / "distance").write_text(" ".join(map(str, row)) + "\n")
    for cpu in range(SOCKETS * CORES):
        topo = root / f"devices/system/cpu/cpu{cpu}/topology"
        topo.mkdir(parents=True)
        (topo / "physical_package_id").write_text(f"{cpu // CORES}\n")
    for i, node in HBM.items():
        dev = root / f"bus/pci/devices/{0x9 + 0x10 * i:04x}:01:00.0"
        dev.mkdir(parents=True)
        (dev / "numa_node").write_text(f"{node}\n")
        cpus = gpu.cpu_ranges(range(i * CORES, (i + 1) * CORES)) if local_cpulist else ""
        (dev / "local_cpulist").write_text(cpus + "\n")
    return str(root)


def props(i: int) -> SimpleNamespace:
    return SimpleNamespace(pci_domain_id=0x9 + 0x10 * i, pci_bus_id=1, pci_device_id=0)


def socket_cpus(i: int) -> set:
    return set(range(i * CORES, (i + 1) * CORES))


@pytest.fixture
def sysfs(tmp_path: Path) -> str:
    return fake_gh200(tmp_path)


def test_memory_only_nodes_stand_for_their_nearest_grace_socket(sysfs) -> None:
    assert [gpu.nearest_cpu_node(HBM[i], sysfs) for i in range(4)] == [0, 1, 2, 3]
    assert [gpu.nearest_cpu_node(n, sysfs) for n in range(4)] == [0, 1, 2, 3]
    assert gpu.node_cpus(HBM[2], sysfs) == set()
    assert gpu.nearest_cpu_node(99, sysfs) is None  # no such node: nothing to say


def test_a_gpu_without_local_cpus_gets_its_sockets(sysfs, tmp_path) -> None:
    assert [gpu.gpu_cpus(props(i), sysfs) for i in range(4)] == [socket_cpus(i) for i in range(4)]
    # where the device does list its CPUs, they are taken as they are
    listed = fake_gh200(tmp_path / "listed", local_cpulist=True)
    assert gpu.gpu_cpus(props(3), listed) == socket_cpus(3)


def test_numa_nodes_skip_the_memory_only_ones(sysfs) -> None:
    assert gpu.numa_nodes({0, 100, 287}, sysfs) == {0, 1, 3}


def fake_torch():
    return SimpleNamespace(
        cuda=SimpleNamespace(is_available=lambda: True, device_count=lambda: 4,
                             get_device_properties=props),
        version=SimpleNamespace(cuda="13.0"), device=lambda kind, index=None: (kind, index))


def test_a_rank_on_its_gpus_socket_is_quiet(sysfs) -> None:
    lines = []
    device = gpu.select_device(fake_torch(), {"LOCAL_RANK": "1", "RANK": "5"}, sysfs,
                               allowed=socket_cpus(1), warn=lines.append)
    assert device == ("cuda", 1) and lines == []


def test_a_rank_on_another_socket_is_named(sysfs) -> None:
    lines = []
    gpu.select_device(fake_torch(), {"LOCAL_RANK": "1", "RANK": "5"}, sysfs,
                      allowed=socket_cpus(0), warn=lines.append)
    assert lines == ["warning: rank 5 (LOCAL_RANK 1) runs on CPUs 0-71 (NUMA domain 0, socket 0) "
                     "but its GPU cuda:1 is attached to CPUs 72-143 (NUMA domain 1, socket 1): "
                     "every copy between host and GPU crosses sockets (docs/guide/launch-modes.md, "
                     "GPU placement)"]


def binding_module(nodes) -> types.ModuleType:
    mod = types.ModuleType("binding")
    mod._get_numa_node_index_for_gpu_index = lambda *, gpu_index: nodes[gpu_index]
    return mod


def test_numa_binding_maps_hbm_nodes_once_per_gpu(sysfs) -> None:
    mod, said = binding_module(HBM), []
    assert numa.install(mod, sysfs, said.append) is True
    assert [mod._get_numa_node_index_for_gpu_index(gpu_index=i) for i in (0, 1, 2, 3, 1)] == \
        [0, 1, 2, 3, 1]
    assert said[1] == ("torchrun_jsc: GPU 1's NUMA node 12 has no CPUs (GPU memory, as on "
                       "GH200): --numa-binding uses node 1, the nearest with CPUs")
    assert len(said) == 4
    assert numa.install(mod, sysfs, said.append) is False  # once


def test_numa_binding_leaves_nodes_with_cpus_alone(sysfs) -> None:
    mod, said = binding_module({0: 0, 1: 1}), []
    numa.install(mod, sysfs, said.append)
    assert [mod._get_numa_node_index_for_gpu_index(gpu_index=i) for i in (0, 1)] == [0, 1]
    assert said == []
    assert numa.install(types.ModuleType("old_torch"), sysfs) is False


def test_torchs_own_binding_finds_the_socket_after_the_patch(sysfs, monkeypatch) -> None:
    """torch.numa.binding (2.9+) computes `node` mode's CPUs through the patched function;
    only its sysfs reads are pointed at the fake tree."""
    binding = pytest.importorskip("torch.numa.binding")
    monkeypatch.setattr(binding, "_get_numa_node_index_for_gpu_index",
                        lambda *, gpu_index: HBM[gpu_index])
    monkeypatch.setattr(binding, "_get_cpu_indices_for_numa_node_MAYBE_NOT_ALLOWED",
                        lambda *, numa_node_index: gpu.node_cpus(numa_node_index, sysfs))
    monkeypatch.setattr(binding, "_get_allowed_cpu_indices_for_current_thread",
                        lambda: set(range(SOCKETS * CORES)))
    assert binding._node_get_logical_cpus_to_bind_to(gpu_index=2) == set()  # torch alone
    numa.install(binding, sysfs, lambda line: None)
    assert binding._node_get_logical_cpus_to_bind_to(gpu_index=2) == socket_cpus(2)


@pytest.mark.parametrize("binding_mode,installed", [("node", True), (None, False)])
def test_torchrun_jsc_installs_the_patch_with_numa_binding_only(monkeypatch, binding_mode,
                                                                installed) -> None:
    import argparse

    pytest.importorskip("torch.numa.binding")
    from launcher.task import torchrun_jsc
    from launcher.task.torchrun_jsc.decide import Decision

    calls, ran = [], []
    monkeypatch.setattr(numa, "install", lambda binding: calls.append(binding.__name__))
    torch_run = SimpleNamespace(run=lambda args: ran.append(args.numa_binding))
    torchrun_jsc._launch(torch_run, argparse.Namespace(numa_binding=binding_mode),
                         Decision(patch=False))
    assert calls == (["torch.numa.binding"] if installed else []) and ran == [binding_mode]
