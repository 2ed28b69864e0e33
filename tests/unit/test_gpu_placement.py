"""Ring 1: ranks of a one-task-per-GPU step in the NUMA domain (or on the socket) of their GPU.

srun mode (and horovod through srun) lays a GPU job's tasks out socket by socket
(--distribution=block:block), so that local rank i runs where GPU i is attached on nodes whose
GPUs are numbered socket by socket (PCI order); the device rule (launcher/gpu.py) warns, in one
line per worker, where a worker's CPUs are all in other NUMA domains than its GPU (on nodes that
report no domains: on another socket). The node is a faked sysfs tree (fake_sysfs): two
sockets of four CPUs, GPUs 0-1 on socket 0 and 2-3 on socket 1, no NUMA facts; and an AMD EPYC
like node, two sockets of four NUMA domains each, one GPU in every other domain."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Dict

import pytest

from launcher.task.hook.torchrun_jsc_kit import gpu
from launcher.render.jobscript import render_jobscript
from tests.unit.test_spec_traps import parse

PCI = {0: 0x07, 1: 0x0f, 2: 0x47, 3: 0x4e}  # GPU index -> PCI bus


def fake_sysfs(root: Path, domains: int, cpus: int, gpus: Dict[int, int],
               numa: str = "node") -> str:
    """A node's sysfs under ``root``: two sockets of ``domains`` NUMA domains of ``cpus`` CPUs,
    numbered domain by domain; GPU i (PCI bus PCI[i]) attached to domain gpus[i]. ``numa``: how
    the node reports its domains: "node" (devices/system/node/nodeN/cpulist, and the cpuN/nodeN
    links as Linux has them), "links" (the links only), "" (nothing: an old kernel)."""
    per_socket = domains * cpus
    for cpu in range(2 * per_socket):
        topo = root / f"devices/system/cpu/cpu{cpu}/topology"
        topo.mkdir(parents=True)
        (topo / "physical_package_id").write_text(f"{cpu // per_socket}\n")
        if numa:
            (root / f"devices/system/cpu/cpu{cpu}/node{cpu // cpus}").mkdir()
    for domain in range(2 * domains if numa == "node" else 0):
        node = root / f"devices/system/node/node{domain}"
        node.mkdir(parents=True)
        (node / "cpulist").write_text(gpu.cpu_ranges(range(domain * cpus, (domain + 1) * cpus)))
    for index, domain in gpus.items():
        dev = root / f"bus/pci/devices/0000:{PCI[index]:02x}:00.0"
        dev.mkdir(parents=True)
        (dev / "local_cpulist").write_text(
            gpu.cpu_ranges(range(domain * cpus, (domain + 1) * cpus)) + "\n")
    return str(root)


@pytest.fixture
def sysfs(tmp_path: Path) -> str:
    """Two sockets of four CPUs, no NUMA facts: the sockets decide."""
    return fake_sysfs(tmp_path, 1, 4, {0: 0, 1: 0, 2: 1, 3: 1}, numa="")


# Two sockets x four NUMA domains of two CPUs (CPUs 0-7 socket 0, 8-15 socket 1), GPUs in
# domains 3, 1, 7, 5: not in the order of their numbers, as on some EPYC nodes.
EPYC_GPUS = {0: 3, 1: 1, 2: 7, 3: 5}


def fake_torch(count: int = 4, pci: bool = True):
    def props(index):
        if not pci:  # a torch without the PCI fields
            return SimpleNamespace(name="GPU")
        return SimpleNamespace(pci_domain_id=0, pci_bus_id=PCI[index], pci_device_id=0)
    return SimpleNamespace(
        cuda=SimpleNamespace(is_available=lambda: True, device_count=lambda: count,
                             get_device_properties=props),
        version=SimpleNamespace(cuda="12.8"),
        device=lambda kind, index=None: (kind, index))


@pytest.mark.parametrize("text, cpus", [
    ("0-3,8,10-11\n", {0, 1, 2, 3, 8, 10, 11}), ("5", {5}), ("", set()), ("x-1", set()),
])
def test_cpulist(text, cpus):
    assert gpu.parse_cpulist(text) == cpus
    if cpus:
        assert gpu.parse_cpulist(gpu.cpu_ranges(cpus)) == cpus
    assert gpu.cpu_ranges({0, 1, 2, 5, 7, 8}) == "0-2,5,7-8" and gpu.cpu_ranges(set()) == ""


def test_gpu_cpus_and_sockets_from_sysfs(sysfs):
    torch = fake_torch()
    assert gpu.gpu_cpus(torch.cuda.get_device_properties(3), sysfs) == {4, 5, 6, 7}
    assert gpu.gpu_cpus(SimpleNamespace(name="old torch"), sysfs) == set()
    assert gpu.sockets({0, 5, 6}, sysfs) == {0, 1}
    assert gpu.sockets({0, 99}, sysfs) == {0}  # an unknown CPU is left out


@pytest.mark.parametrize("local_rank, allowed, warned", [
    (1, {2, 3}, False),   # socket by socket: rank 1 near GPU 1
    (2, {4, 5}, False),
    (1, {4, 5}, True),    # Slurm's default (cyclic over sockets): rank 1 on the far socket
    (2, {2, 3}, True),
    (1, set(range(8)), False),  # the whole node (one agent per node): nothing to say here
    (3, {3, 4}, False),   # partly near
])
def test_a_worker_on_the_far_socket_is_told_in_one_line(sysfs, local_rank, allowed, warned):
    lines = []
    env = {"RANK": str(8 + local_rank), "LOCAL_RANK": str(local_rank)}
    device = gpu.select_device(fake_torch(), env, sysfs=sysfs, allowed=allowed,
                               warn=lines.append)
    assert device == ("cuda", local_rank)
    if not warned:
        assert lines == []
        return
    near = "0-3" if local_rank < 2 else "4-7"
    own = gpu.cpu_ranges(allowed)
    assert lines == [
        f"warning: rank {8 + local_rank} (LOCAL_RANK {local_rank}) runs on CPUs {own} (socket "
        f"{1 - local_rank // 2}) but its GPU cuda:{local_rank} is attached to CPUs {near} "
        f"(socket {local_rank // 2}): every copy between host and GPU crosses sockets "
        "(docs/guide/launch-modes.md, GPU placement)"]


def test_no_placement_facts_no_warning(sysfs, tmp_path):
    lines = []
    gpu.select_device(fake_torch(pci=False), {"LOCAL_RANK": "1"}, sysfs=sysfs, allowed={4},
                      warn=lines.append)
    gpu.select_device(fake_torch(), {"LOCAL_RANK": "1"}, sysfs=str(tmp_path / "none"),
                      allowed={4}, warn=lines.append)
    assert lines == []


@pytest.mark.parametrize("numa", ["node", "links"])
@pytest.mark.parametrize("allowed, warned", [
    ({6, 7}, None),      # GPU 0's domain (3)
    ({6}, None),
    ({5, 6}, None),      # partly in it
    ({4, 5}, "NUMA domains"),  # the right socket (0), another domain (2)
    ({0, 1, 2, 3}, "NUMA domains"),
    ({14, 15}, "sockets"),     # the other socket
])
def test_numa_domains_decide_where_the_node_reports_them(tmp_path, numa, allowed, warned):
    sysfs = fake_sysfs(tmp_path, 4, 2, EPYC_GPUS, numa)
    assert gpu.numa_nodes({0, 7, 8}, sysfs) == {0, 3, 4} and gpu.numa_nodes({99}, sysfs) == set()
    lines = []
    gpu.select_device(fake_torch(), {"RANK": "4", "LOCAL_RANK": "0"}, sysfs=sysfs,
                      allowed=allowed, warn=lines.append)
    if warned is None:
        assert lines == []
        return
    own = gpu.cpu_ranges(allowed)
    domains = gpu.cpu_ranges({c // 2 for c in allowed})
    assert lines == [
        f"warning: rank 4 (LOCAL_RANK 0) runs on CPUs {own} (NUMA domain {domains}, socket "
        f"{min(allowed) // 8}) but its GPU cuda:0 is attached to CPUs 6-7 (NUMA domain 3, "
        f"socket 0): every copy between host and GPU crosses {warned} "
        "(docs/guide/launch-modes.md, GPU placement)"]


@pytest.mark.parametrize("allowed, warned", [({4, 5}, False), ({14, 15}, True)])
def test_without_numa_facts_the_sockets_decide(tmp_path, allowed, warned):
    sysfs = fake_sysfs(tmp_path, 4, 2, EPYC_GPUS, numa="")
    assert gpu.numa_nodes({0, 8}, sysfs) == set()
    lines = []
    gpu.select_device(fake_torch(), {"RANK": "0", "LOCAL_RANK": "0"}, sysfs=sysfs,
                      allowed=allowed, warn=lines.append)
    assert lines == ([f"warning: rank 0 (LOCAL_RANK 0) runs on CPUs 14-15 (socket 1) but its GPU "
                      "cuda:0 is attached to CPUs 6-7 (socket 0): every copy between host and "
                      "GPU crosses sockets (docs/guide/launch-modes.md, GPU placement)"]
                     if warned else [])


def test_an_odd_sysfs_never_stops_a_worker(tmp_path, monkeypatch):
    sysfs = fake_sysfs(tmp_path, 4, 2, EPYC_GPUS)
    (tmp_path / "devices/system/node/node2/cpulist").write_text("4-x\n")  # not a CPU list
    (tmp_path / "devices/system/node/nodeX").mkdir()
    lines = []
    select = lambda allowed: gpu.select_device(fake_torch(), {"LOCAL_RANK": "0"}, sysfs=sysfs,
                                               allowed=allowed, warn=lines.append)
    assert select({4, 5}) == ("cuda", 0) and lines == []  # domain unknown: same socket, silent
    assert select({14, 15}) == ("cuda", 0) and len(lines) == 1 and "crosses sockets" in lines[0]

    def broken(*_args):
        raise ValueError("a sysfs nobody foresaw")
    monkeypatch.setattr(gpu, "numa_nodes", broken)
    assert select({14, 15}) == ("cuda", 0) and len(lines) == 1  # no line, no exception


def render(launch: str, job: str = "gpus_per_node: 4") -> str:
    return render_jobscript(parse(f"""\
        job: {{nodes: 2, {job}}}
        runtime: {{kind: apptainer, image: i.sif}}
        launch: {{{launch}}}
        program: [python3, t.py]
        """))


def launch_line(script: str) -> str:
    text = script.split("\n# Launch: ", 1)[1]
    return text.split("\nlaunch_pid=", 1)[0]


@pytest.mark.parametrize("launch", ["mode: srun", "mode: horovod"])
def test_one_task_per_gpu_modes_lay_tasks_out_socket_by_socket(launch):
    line = launch_line(render(launch))
    assert "--distribution=block:block" in line and "socket by socket" in line.split("\n")[0]


@pytest.mark.parametrize("launch, job", [
    ("mode: srun", "cpus_per_task: 4"),  # no GPUs: Slurm's default
    ("mode: srun, procs_per_node: 1", "gpus_per_node: 4"),  # one task per node
    ("mode: srun", "gpus_per_node: 4, sbatch: {distribution: 'block:cyclic'}"),  # the user's
    ("mode: torchrun", "gpus_per_node: 4"),  # one agent per node
    ("mode: horovod, mpi: mpirun", "gpus_per_node: 4"),  # mpirun: --bind-to none
])
def test_no_layout_where_it_is_not_the_kits_to_choose(launch, job):
    assert "--distribution" not in launch_line(render(launch, job))
