"""Ring 3, `make test-scale` only (marker `scale`, outside `make test` and CI): the lab at 64
JUWELS Booster nodes (issue 36) and torch jobs through the composer at the largest sizes that
fit this machine's 23 GB.

The lab is grown to 64 nodes once for the module and brought back to the size it found at the
end. On it: every node's names (hostname -> the management address, `i` -> the
fabric, each reaching the next node over its own network) from a 64-node step; examples/distributed_sum.py in srun mode on 64 nodes x 1 process
(one torch process per node, about 145 MB each bare); the demo program in torchrun mode
(torchrun_jsc's agent and its worker: two torch processes per node) on 32 nodes: 64 nodes in
torchrun mode need about 18 GB bare (23 GB in Apptainer), more than this machine has beside
other work (docs/development/cluster.md, "Many nodes").
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest
import yaml

from tests.helpers import labsize
from tests.helpers.labsize import REPO, STATE, node, sh

pytestmark = pytest.mark.scale
NODES = 64
VENV = os.environ.get("VENV", str(REPO / ".venv"))


@pytest.fixture(scope="module")
def lab64(cluster) -> Iterator[float]:
    with labsize.resized(NODES) as took:
        yield took


def rss_mib(pids) -> float:
    total = 0
    for pid in pids:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1])
    return total / 1024


def test_lab_of_64_nodes_has_the_jsc_network_on_every_node(lab64):
    names = [node(k) for k in range(1, NODES + 1)]
    assert labsize.batch_nodes() == names
    slurmd = list(labsize.slurmd_pids().values())
    print(f"lab at {NODES} nodes: resize {lab64:.1f} s; {len(slurmd)} slurmd hold "
          f"{rss_mib(slurmd):.0f} MiB RSS")
    t0 = time.monotonic()
    r = sh(["srun", f"-N{NODES}", "--ntasks-per-node=1", "--time=2", "python3", "-c",
            labsize.PROBE, *names], timeout=300)
    print(f"srun of the probe on {NODES} nodes: {time.monotonic() - t0:.1f} s")
    assert r.returncode == 0, r.stderr
    probes = {x["me"]: x for x in (json.loads(line.split(" ", 1)[1])
                                   for line in r.stdout.splitlines() if line.startswith("PROBE "))}
    assert sorted(probes) == names, r.stdout
    for k, name in enumerate(names, 1):
        x = probes[name]
        assert x["me_addrs"] == ["127.0.1.1", f"10.67.0.{k}"], x
        assert x["me_i_addrs"] == [f"10.66.0.{k}"], x
        assert x[x["peer"] + "i"] == "reachable", x
        assert x["src"][x["peer"] + "i"] == f"10.66.0.{k}", x  # the fabric
        assert x[x["peer"]] == "reachable", x  # the hostname: the management network
        assert x["src"][x["peer"]] == f"10.67.0.{k}", x


def submit(folder: Path, name: str, nodes: int, mode: str, program) -> str:
    (folder / f"{name}.yaml").write_text(yaml.safe_dump({
        "job": {"nodes": nodes, "name": name, "time": "00:10:00", "partition": "batch"},
        "site": {"profile": "jsc", "venv": VENV},
        "runtime": {"kind": "bare"},
        "launch": {"mode": mode, "procs_per_node": 1},
        "program": ["python3", "-u", *program]}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env["PYTHONPATH"] = str(REPO)
    p = sh([sys.executable, "-m", "launcher", "submit", f"{name}.yaml"], cwd=folder, env=env)
    assert p.returncode == 0, p.stderr
    return p.stdout.strip()


def finished(cluster, job: str, folder: Path) -> str:
    """The job's output and its per-node logs, once it left the queue and COMPLETED."""
    t0 = time.monotonic()
    cluster.wait_gone(job, 600)
    info = cluster.job_info(job)
    text = cluster.collect_output(job, info, str(folder))
    print(f"job {job} {info.get('JobState')}: {info.get('StartTime')} -> {info.get('EndTime')} "
          f"(waited {time.monotonic() - t0:.0f} s)")
    assert info.get("JobState") == "COMPLETED", text[-4000:]
    return text


def test_srun_mode_on_64_nodes(cluster, lab64, shared_tmp):
    job = submit(shared_tmp, "scale-srun-64", NODES, "srun",
                 [str(REPO / "examples/distributed_sum.py")])
    text = finished(cluster, job, shared_tmp)
    [line] = [x for x in text.splitlines() if "SUM_SUMMARY " in x]
    summary = json.loads(line.split("SUM_SUMMARY ", 1)[1])
    assert summary["world_size"] == NODES and summary["ok"], summary
    assert summary["sum"] == NODES * (NODES + 1) // 2, summary
    # the lab's MpiDefault=pmix gives every srun task PMIX_RANK, which the program names "mpi"
    assert summary["launcher"] == "mpi" and summary["argv"] == [], summary
    assert sorted(summary["hosts"]) == [node(k) for k in range(1, NODES + 1)], summary


def test_torchrun_mode_on_32_nodes(cluster, lab64, shared_tmp):
    n = 32
    job = submit(shared_tmp, "scale-torchrun-32", n, "torchrun",
                 [str(REPO / "examples/ddp_train.py"), "--steps", "3"])
    text = finished(cluster, job, shared_tmp)
    assert f"job {job}: {n} nodes, rendezvous {node(1)}i:" in text, text[-3000:]
    [summary] = cluster.parse_summaries(text)
    assert cluster.check_summary(summary, n) == [], summary
    assert (STATE / "nodes").read_text().strip() == str(NODES)
