"""Ring 1: job.spare_nodes (launcher/features/spare.py): the key's errors, and the plan's
pieces: #SBATCH --nodes = nodes + spares with --no-kill, the node list's split at batch scope,
the launch as one step per training node under the supervisor with the heartbeat in front of
each task, torchrun's --nnodes the training nodes', --max_restarts defaulting to the spares,
per-node logs by node name; the preview says which nodes train and which wait. The
supervisor itself: tests/fakes/test_spares.py; on the lab: tests/lab/test_spare_nodes.py.
"""

from __future__ import annotations

import pytest

from launcher import cli, kit
from launcher.model import SpecError
from launcher.plan import build_plan
from launcher.render.jobscript import render_jobscript
from launcher.render.preview import render_preview
from launcher.spec import parse_spec

SPEC = """job: {{nodes: 2, spare_nodes: {spare}, time: "{time}", gpus_per_node: 2{job}}}
site: jsc
runtime: {{kind: apptainer, image: image.sif}}
launch: {{mode: {mode}{launch}}}
program: [python3, -u, train.py]
"""


def spec(spare=1, mode="torchrun", launch="", time="00:05:00", job=""):
    return parse_spec(SPEC.format(spare=spare, mode=mode, launch=launch, time=time, job=job),
                      "s.yaml")


def test_the_script_allocates_the_spares_and_runs_the_supervisor():
    text = render_jobscript(spec())
    assert "#SBATCH --nodes=3\n" in text and "#SBATCH --no-kill\n" in text
    assert "\njsc_spare_nodes 2  # job.spare_nodes: the first 2 train, 1 wait\n" in text
    launch = text[text.index("# Launch:"):].replace(" \\\n    ", " ")
    assert launch.startswith("# Launch: one torchrun_jsc per node, 2 processes each; a step "
                             "per training node, spares wait (job.spare_nodes).\n"
                             "jsc_spares_launch 60 srun --kill-on-bad-exit=1 --nodes=1 "), launch
    assert ('python3 -I "${kit}/node/run.py" spares beat -- apptainer exec ' in launch)
    assert '"--nnodes=${ntrain}"' in launch and "--max_restarts=1 " in launch, launch
    assert "${nnodes}" not in launch, launch  # the allocation's count is for the set-up steps


def test_without_spares_nothing_changes():
    text = render_jobscript(spec(spare=0))
    assert "#SBATCH --nodes=2\n" in text and "no-kill" not in text and "spare" not in text
    assert '"--nnodes=${nnodes}"' in text.replace(" \\\n    ", " ")


def test_max_restarts_given_is_kept_and_node_logs_go_by_name():
    data = SPEC.format(spare=2, mode="torchrun", launch=", max_restarts: 0", time="00:05:00",
                       job="")
    data = data.replace('gpus_per_node: 2}', 'gpus_per_node: 2, node_output: "logs/%x.%n.out"}')
    launch = render_jobscript(parse_spec(data, "s.yaml")).replace(" \\\n    ", " ")
    assert "--max_restarts=0 " in launch and "--output=logs/%x.%N.out" in launch, launch


def test_the_supervisor_forwards_what_the_agent_reads():
    """Enroot forwards by name only: the node rank and torch's store opt-out reach the agent."""
    plan = build_plan(spec(), "submit", kit.DEFAULT)
    assert {"TORCHRUN_JSC_NODE_RANK", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"} <= \
        set(plan.runtime.exports)


def test_the_heartbeat_timeout_is_a_key_and_the_supervisors_argument():
    """job.heartbeat_timeout: jsc_spares_launch's TIMEOUT (launcher/node/spares.py derives the
    nodes' batch host timeout and the start grace from it); 60 s without it."""
    assert spec().job.heartbeat_timeout == 60
    text = render_jobscript(spec(job=", heartbeat_timeout: 90"))
    assert "\njsc_spares_launch 90 srun " in text, text


@pytest.mark.parametrize("job, message", [
    (", heartbeat_timeout: 2", "job.heartbeat_timeout: must be between 5 and 3600, got 2"),
    (", heartbeat_timeout: 1.5", "job.heartbeat_timeout: must be an integer, got 1.5"),
    (", heartbeat_timeout: 30, spare_nodes_: 1", "unknown key 'spare_nodes_'"),
])
def test_bad_heartbeat_timeouts_are_one_line(job, message):
    with pytest.raises(SpecError) as e:
        spec(job=job)
    assert message in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_a_heartbeat_timeout_without_spares_says_what_it_needs():
    with pytest.raises(SpecError) as e:
        spec(spare=0, job=", heartbeat_timeout: 30")
    assert ("job.heartbeat_timeout: is the spare nodes' heartbeat: it needs job.spare_nodes "
            ">= 1") in str(e.value), str(e.value)


@pytest.mark.parametrize("value, message", [
    (-1, "job.spare_nodes: must be between 0 and 100000, got -1"),
    ('"two"', "job.spare_nodes: must be an integer, got 'two'"),
])
def test_bad_values_are_one_line(value, message):
    with pytest.raises(SpecError) as e:
        spec(spare=value)
    assert message in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_srun_mode_says_it_recovers_by_requeue_only(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(SPEC.format(spare=1, mode="srun", launch="", time="00:05:00", job=""))
    assert cli.main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert ("job.spare_nodes: mode srun has no per-node agent that could meet a spare: it "
            "recovers from a lost node by job.requeue only; spare nodes need launch.mode "
            "torchrun") in err, err


def test_preview_says_which_nodes_train_and_which_wait():
    text = render_preview(spec(), "jwb[0001-0003]")
    assert "# job.spare_nodes: 2 train, 1 wait as spares" in text, text
    assert "node 0 jwb0001: node_rank=0 is_host=yes" in text
    assert "node 1 jwb0002: node_rank=1 is_host=no" in text
    assert "node 2 " not in text and "spare jwb0003: waits" in text, text
    assert "--nnodes=2 " in text, text
