"""Ring 3: launch modes accelerate and deepspeed on the local cluster (JSC-like network:
the hostname is not the inter-node name), 2 nodes x 2 processes, bare (the project venv)
and Apptainer (launchers.sif, `make launchers-image`). examples/distributed_sum.py prints
one SUM_SUMMARY line: world size 4, sum 10, the launcher it detected. A rank that kills
itself ends the job non-zero within seconds (the others would wait 300 s). One job per
configuration; the kill tests run bare (no container start to wait for).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from tests.helpers.labjobs import assert_ended_within, make
from tests.lab.test_jobs import run_checked_in

REPO = Path(__file__).resolve().parents[2]
VENV = os.environ.get("VENV", str(REPO / ".venv"))
TIMEOUT_S = 300


@pytest.fixture(scope="module")
def launchers_image() -> str:
    make("launchers-image")
    return "launchers.sif"


def sum_summaries(output: str) -> list:
    return [json.loads(line.split("SUM_SUMMARY ", 1)[1]) for line in output.splitlines()
            if "SUM_SUMMARY " in line]


def run_spec(cluster, shared_tmp: Path, name: str, mode: str, runtime: dict, args=()):
    spec = shared_tmp / f"{name}.yaml"
    site = {"profile": "jsc"} if runtime["kind"] != "bare" else {"profile": "jsc", "venv": VENV}
    spec.write_text(yaml.safe_dump({
        "job": {"nodes": 2, "name": name, "time": "00:05:00", "partition": "batch",
                "node_output": None},
        "site": site, "runtime": runtime,
        "launch": {"mode": mode, "procs_per_node": 2},
        "program": ["python3", "-u", "examples/distributed_sum.py", *args]}))
    from launcher.render.jobscript import render_jobscript
    from launcher.spec import load_spec
    job = shared_tmp / f"{name}.job"
    job.write_text(render_jobscript(load_spec(str(spec))))
    res = cluster.run_job(str(job), ["-o", str(shared_tmp / f"{name}-%j.out")],
                          timeout=TIMEOUT_S, cwd=str(REPO))
    print(f"{name}: job {res.job_id} {res.state} submit->done {res.elapsed_s:.1f} s")
    return res


HOSTILE = ["a b", "$(touch pwned)", "*", ""]


def check_sum(res, mode: str, argv: list) -> None:
    assert res.state == "COMPLETED", res.output
    [summary] = sum_summaries(res.output)
    assert (summary["world_size"], summary["sum"], summary["ok"]) == (4, 10, True), summary
    assert summary["launcher"] == mode and summary["backend"] == "gloo"
    assert summary["hosts"] == ["jwb0001", "jwb0002"]
    assert summary["argv"] == argv


@pytest.mark.parametrize("mode", ["accelerate", "deepspeed"])
def test_sum_bare_with_hostile_args(cluster, shared_tmp, mode):
    res = run_spec(cluster, shared_tmp, f"sum-{mode}-bare", mode, {"kind": "bare"}, HOSTILE)
    check_sum(res, mode, HOSTILE)
    assert not list(REPO.glob("pwned*"))


@pytest.mark.parametrize("mode", ["accelerate", "deepspeed"])
def test_checked_in_sum_job_in_apptainer(cluster, shared_tmp, launchers_image, mode):
    """jobs/sum_MODE.job as checked in (launchers.sif), submitted from the repository root."""
    res = run_checked_in(cluster, shared_tmp, REPO / "jobs" / f"sum_{mode}.job")
    check_sum(res, mode, [])


@pytest.mark.parametrize("mode", ["accelerate", "deepspeed"])
def test_killed_rank_ends_the_job_within_seconds(cluster, shared_tmp, mode):
    res = run_spec(cluster, shared_tmp, f"kill-{mode}", mode, {"kind": "bare"},
                   ["--kill-rank", "3", "--timeout", "300"])
    assert res.state == "FAILED", res.output
    assert sum_summaries(res.output) == []
    assert_ended_within(res, r"rank 3: killing myself \(--kill-rank\) at unix time ([0-9.]+)",
                        f"kill ({mode})", 20)
