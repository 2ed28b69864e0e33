"""Ring 1: launch modes accelerate and deepspeed (launcher/modes/accelerate.py,
deepspeed.py): argv, per-node rank in the preview, spec errors, requeue refused."""

from __future__ import annotations

import dataclasses
import re
import textwrap

import pytest
import yaml

from launcher import kit
from launcher.render.jobscript import render_jobscript
from launcher.model import SpecError
from launcher.modes import mode_for, plan_launch
from launcher.render.preview import render_preview
from launcher.spec import load_spec, parse_spec
from tests.helpers.cluster import HOSTILE, HOSTILE_NL

PROGRAM = ["python3", HOSTILE_NL, f"--flag={HOSTILE}", "", "*", "~", "--local_rank=7"]


def spec_text(mode: str, runtime: dict, **launch: object) -> str:
    return yaml.safe_dump({"job": {"nodes": 2}, "site": "jsc", "runtime": runtime,
                           "launch": {"mode": mode, "procs_per_node": 2, **launch},
                           "program": [a.replace("$", "$$") for a in PROGRAM]}, allow_unicode=True)


def error(text: str) -> str:
    with pytest.raises(SpecError) as err:
        render_jobscript(parse_spec(textwrap.dedent(text), "x.yaml"))
    return str(err.value)


# --- ring 1 ------------------------------------------------------------------------------

def test_accelerate_argv_total_processes_and_first_node():
    _, plan = plan_launch(load_spec("jobs/sum_accelerate.yaml"))
    text = render_jobscript(load_spec("jobs/sum_accelerate.yaml"))
    assert "nprocs=$((nnodes * 2))" in text  # --num_processes is the total
    task = [str(t) for t in plan.task]
    i = plan.task.index(kit.file("task/accelerate-node.sh"))
    assert plan.task[i + 1:i + 5] == ("", "1", "9", "accelerate")  # generated config, CPU
    assert "--multi_gpu" in task and "--no_python" in task and "--rdzv_backend=static" in task
    assert 'rdzv_host="${first_node}${host_suffix}"' in text
    # The per-node value is expanded in the kit's node script, never at batch scope.
    assert '--machine_rank "$SLURM_NODEID"' in \
        (kit.installed() / "task" / "accelerate-node.sh").read_text()
    assert not [line for line in text.splitlines()
                if "machine_rank" in line and not line.startswith("#")]
    assert "#SBATCH --ntasks-per-node=1" in text
    assert mode_for("accelerate").world_size(load_spec("jobs/sum_accelerate.yaml"), 2) == 4


def test_accelerate_gpu_and_user_config():
    spec = parse_spec(spec_text("accelerate", {"kind": "bare"}, config_file="acc.yaml")
                      .replace("nodes: 2", "nodes: 2\n  gpus_per_node: 4"), "x.yaml")
    task = plan_launch(spec)[1].task
    i = task.index(kit.file("task/accelerate-node.sh"))
    assert task[i + 1:i + 3] == ("acc.yaml", "0")  # the user's file; GPUs: no ACCELERATE_USE_CPU


def test_deepspeed_argv_and_hostfile_lines():
    text = render_jobscript(load_spec("jobs/sum_deepspeed.yaml"))
    assert '"${kit}/task/deepspeed-node.sh"' in text.replace(" \\\n    ", " ")
    assert '--hostfile "$hostfile" --node_rank "$SLURM_NODEID"' in \
        (kit.installed() / "task" / "deepspeed-node.sh").read_text()
    assert "--no_ssh" in text and '"--master_addr=${rdzv_host}"' in text
    assert "--no_local_rank" in text and "pdsh" not in text
    assert not re.search(r"(^|[ \"])ssh ", text)
    assert "ds_slots=2" in text and 'ds_suffix="${host_suffix}"' in text
    spec = parse_spec(spec_text("deepspeed", {"kind": "bare"}, local_rank_arg=True), "x.yaml")
    assert "--no_local_rank" not in plan_launch(spec)[1].task


def test_preview_shows_each_nodes_rank():
    spec = load_spec("jobs/sum_accelerate.yaml")
    spec = dataclasses.replace(spec, job=dataclasses.replace(spec.job, nodes=3))
    text = render_preview(spec, "jwb[0001-0003]", 7, system="juwelsbooster")
    assert "--num_processes=6" in text and "--main_process_ip=jwb0001i" in text
    for n in range(3):
        assert f"--machine_rank {n} python3 -u examples/distributed_sum.py" in text
    text = render_preview(load_spec("jobs/sum_deepspeed.yaml"), "jwb[0001-0002]", 7,
                          system="juwelsbooster")
    assert "--node_rank 1 python3" in text and "--master_addr=jwb0001i" in text


@pytest.mark.parametrize("text, expected", [
    ("job: {nodes: 1}\nlaunch: {mode: accelerate}\nprogram: [p]",
     "x.yaml: launch.procs_per_node: mode accelerate starts at least 2 processes in all "
     "(accelerate's --multi_gpu); for one process use mode torchrun or srun, got 1"),
    ("job: {nodes: 2}\nlaunch: {mode: accelerate, local_rank_arg: true}\nprogram: [p]",
     "x.yaml: launch.local_rank_arg: means nothing in mode 'accelerate': it makes deepspeed "
     "append --local_rank=N to the program's arguments (mode deepspeed), got True"),
    ("job: {nodes: 2}\nlaunch: {mode: deepspeed, config_file: a.yaml}\nprogram: [p]",
     "x.yaml: launch.config_file: means nothing in mode 'deepspeed': it is accelerate's "
     "--config_file (mode accelerate), got 'a.yaml'"),
    ("job: {nodes: 2}\nlaunch: {mode: deepspeed, local_rank_arg: yes please}\nprogram: [p]",
     "x.yaml: launch.local_rank_arg: must be true or false, got 'yes please'"),
    ("job: {nodes: 2}\nlaunch: {mode: deepspeed, max_restarts: 1}\nprogram: [p]",
     "x.yaml: launch.max_restarts: means nothing in mode 'deepspeed': it is torchrun's "
     "--max_restarts (modes torchrun and mpirun_torchrun), got 1"),
    ("job: {nodes: 2}\nlaunch: {mode: srun, command: accelerate}\nprogram: [p]",
     "x.yaml: launch.command: means nothing in mode 'srun': it is the per-node launcher of "
     "modes torchrun, mpirun_torchrun, accelerate, deepspeed and ray; put the program in "
     "program, got 'accelerate'"),
    ("job: {nodes: 2}\nlaunch: {mode: accelerate, config_file: \"a\\nb\"}\nprogram: [p]",
     "x.yaml: launch.config_file: must not contain a newline, got 'a\\nb'"),
])
def test_spec_errors_of_the_new_modes(text, expected):
    assert error(text) == expected


# --- ring 2 ------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["accelerate", "deepspeed"])
def test_requeue_is_refused(mode):
    assert error(f"job: {{nodes: 2, time: '1:00:00', requeue: true}}\nlaunch: {{mode: {mode}}}\n"
                 "program: [p]").startswith(f"x.yaml: job.requeue: mode {mode}: ")
