"""Ring 1: the demo's verdict (scripts/cluster/slurmjob.py) without Slurm: summary parsing and
checks, expected world size, and the exit code of the CLI that `make demo` runs."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from tests.conftest import REPO, load_slurmjob

sj = load_slurmjob()
GOOD = {"world_size": 8, "steps": 20, "loss_first": 0.66, "loss_last": 0.22,
        "params_identical": True, "resumed_from_step": 0}


@pytest.mark.parametrize("change, problem", [
    ({}, None),
    ({"world_size": 4}, "world_size 4, expected 8"),
    ({"params_identical": False}, "parameters differ between ranks"),
    ({"loss_last": 0.7}, "loss did not decrease"),
    ({"loss_first": None}, "loss did not decrease"),
])
def test_check_summary(change, problem):
    problems = sj.check_summary({**GOOD, **change}, 8)
    assert problems == [] if problem is None else any(problem in p for p in problems), problems


def test_parse_summaries_finds_prefixed_lines_anywhere():
    text = ("noise\n[1,0]<stdout>:DDP_SUMMARY " + json.dumps(GOOD) + "\n"
            "DDP_SUMMARY " + json.dumps({**GOOD, "steps": 3}) + "\n")
    assert [s["steps"] for s in sj.parse_summaries(text)] == [20, 3]


def test_parse_summaries_ignores_a_tag_glued_to_the_line_end():
    """Seen in CI: mpirun --tag-output appended the next chunk's tag to the summary line."""
    text = "[1,0]<stdout>:DDP_SUMMARY " + json.dumps(GOOD) + "[1,0]<stdout>:\n"
    assert sj.parse_summaries(text) == [GOOD]


def job(tmp_path, launch: str) -> str:
    path = tmp_path / "x.job"
    path.write_text("#!/bin/bash\n#SBATCH --nodes=2\n" + launch + "\n")
    return str(path)


def result(state="COMPLETED", output=None, num_tasks="2"):
    out = "DDP_SUMMARY " + json.dumps(GOOD) if output is None else output
    return sj.JobResult(job_id="7", state=state, exit_code="0:0", num_nodes=2, elapsed_s=1.0,
                        output=out, info={"NumTasks": num_tasks})


def test_expected_world_size(tmp_path):
    torchrun = job(tmp_path, "srun torchrun_jsc --nnodes=2 --nproc_per_node=4 train.py")
    assert sj.expected_world_size(torchrun, result()) == 8
    per_task = job(tmp_path, "srun --ntasks-per-node=4 python3 train.py")
    assert sj.expected_world_size(per_task, result(num_tasks="8")) == 8


@pytest.mark.parametrize("res, rc", [
    (result(), 0),
    (result(state="FAILED"), 1),
    (result(output="no summary"), 1),
    (result(output=("DDP_SUMMARY " + json.dumps(GOOD) + "\n") * 2), 1),
])
def test_cli_exit_code(tmp_path, monkeypatch, capsys, res, rc):
    jobfile = job(tmp_path, "srun torchrun_jsc --nproc_per_node=4 train.py")
    seen = {}

    def fake_run_job(path, sbatch_args, timeout):
        seen.update(path=path, sbatch_args=sbatch_args)
        return res

    monkeypatch.setattr(sj, "run_job", fake_run_job)
    assert sj.main([jobfile, "--timeout", "5", "--", "-o", "/x/%j.out"]) == rc
    assert seen == {"path": jobfile, "sbatch_args": ["-o", "/x/%j.out"]}


def test_cluster_script_passes_shellcheck():
    assert shutil.which("shellcheck"), "shellcheck missing: run `make setup`"
    p = subprocess.run(["shellcheck", str(REPO / "scripts/cluster.sh")], capture_output=True,
                       text=True, timeout=60, check=False)
    assert p.returncode == 0, p.stdout


NODE_LOG = """torchrun_jsc: endpoint=jwb0001i:29501; node_rank=0 (SLURM_NODEID); is_host=True
W1125 19:14:13.982000 19344 torch/distributed/run.py:874] *****************************************
[W1125 19:14:13.629605224 socket.cpp:207] [c10d] The hostname of the client socket cannot be retrieved. err=-3
[rank1]:[W1125 19:14:26.946826754 reducer.cpp:1529] Warning: find_unused_parameters=True was specified
step 10 loss 0.350183
Warning: the user's own warning stays
DDP_SUMMARY {"world_size": 8}"""


def test_torch_log_lines_are_counted_not_shown():
    text, hidden = sj.without_torch_log(NODE_LOG)
    assert hidden == 3
    assert text.splitlines() == [
        "torchrun_jsc: endpoint=jwb0001i:29501; node_rank=0 (SLURM_NODEID); is_host=True",
        "step 10 loss 0.350183", "Warning: the user's own warning stays",
        'DDP_SUMMARY {"world_size": 8}']


@pytest.mark.parametrize("path, top", [("/tmp/x/kit", "/tmp"), ("/tmp", "/tmp"),
                                       ("/dev/shm/a", "/dev/shm"), ("/tmpfoo/kit", None),
                                       ("/p/project/kit", None)])
def test_node_local_submit_directory(path, top):
    assert sj.node_local(path) == top
