"""Ring 2: site jsc's profile facts in a rendered script run by bash with the recording fakes.

`module purge` runs right before `module load` (and only then), and the InfiniBand defaults
reach every task without replacing a value a module or the submit environment set: a bash
function `module` (as Lmod exports it, BASH_FUNC_module%%) that sets NCCL_IB_TIMEOUT on load
stands in for a site module.
"""

from pathlib import Path

import pytest

from tests.helpers.cluster import Cluster

JSC = """\
    job: {nodes: 2}
    site: {profile: jsc, modules: [Stages/2025, GCC]}
    program: [python3, t.py]
    """
# Runs the fake `module` command (it records), then does what a site module may: export.
MODULE_FUNCTION = '() { command module "$@" || return; ' \
    'if [ "$1" = load ]; then export NCCL_IB_TIMEOUT=99; fi; }'


@pytest.fixture
def fakes(tmp_path: Path) -> Cluster:
    cluster = Cluster(tmp_path)
    for name in ("NCCL_IB_TIMEOUT", "NCCL_IB_RETRY_CNT", "UCX_RC_TIMEOUT"):
        cluster.env.pop(name, None)
    return cluster


def _task_env(fakes: Cluster) -> list:
    records = fakes.records("torchrun_jsc")
    assert len(records) == 2  # one per node
    return [r["env"] for r in records]


def test_purge_then_load_and_defaults_reach_the_tasks(fakes):
    done = fakes.run(fakes.render(JSC), FAKE_MODULES_DIR=str(fakes.dir.parent))
    assert done.returncode == 0, done.stderr
    assert [r["argv"] for r in fakes.records("module")] == \
        [["purge"], ["load", "Stages/2025", "GCC"]]
    for env in _task_env(fakes):
        assert (env["NCCL_IB_TIMEOUT"], env["NCCL_IB_RETRY_CNT"], env["UCX_RC_TIMEOUT"]) == \
            ("50", "10", "4s")


def test_a_modules_value_is_kept(fakes):
    done = fakes.run(fakes.render(JSC), FAKE_MODULES_DIR=str(fakes.dir.parent),
                     **{"BASH_FUNC_module%%": MODULE_FUNCTION})
    assert done.returncode == 0, done.stderr
    assert [r["argv"] for r in fakes.records("module")] == \
        [["purge"], ["load", "Stages/2025", "GCC"]]
    for env in _task_env(fakes):
        assert env["NCCL_IB_TIMEOUT"] == "99"  # the module's, not the profile's 50
        assert env["UCX_RC_TIMEOUT"] == "4s"


def test_submit_environment_value_kept_and_spec_value_wins(fakes):
    script = fakes.render(JSC.replace("GCC]}", "GCC], env: {UCX_RC_TIMEOUT: 9s}}"))
    done = fakes.run(script, FAKE_MODULES_DIR=str(fakes.dir.parent), NCCL_IB_RETRY_CNT="7",
                     UCX_RC_TIMEOUT="1s")
    assert done.returncode == 0, done.stderr
    for env in _task_env(fakes):
        assert env["NCCL_IB_RETRY_CNT"] == "7"  # inherited from the submit environment
        assert env["UCX_RC_TIMEOUT"] == "9s"  # the spec's site.env: literal, always
        assert env["NCCL_IB_TIMEOUT"] == "50"


def test_no_purge_when_switched_off(fakes):
    script = fakes.render(JSC.replace("GCC]}", "GCC], module_purge: false}"))
    done = fakes.run(script, FAKE_MODULES_DIR=str(fakes.dir.parent))
    assert done.returncode == 0, done.stderr
    assert [r["argv"] for r in fakes.records("module")] == [["load", "Stages/2025", "GCC"]]
