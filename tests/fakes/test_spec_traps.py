"""Ring 2: the spec-trap fixes of issue 10, run by bash with the recording fakes.

env.prepend/append extend a variable at run time with hostile entries intact, launch.command
given as argv and launch.mpi_plugin reach the argv, and the log lines print what Slurm
will really name the files.
"""

from pathlib import Path

import pytest
import yaml

from tests.helpers.cluster import HOSTILE, HOSTILE_NAME, HOSTILE_NL, Cluster


@pytest.fixture
def fakes(tmp_path: Path) -> Cluster:
    return Cluster(tmp_path)


def spec(**sections: object) -> str:
    data = {"job": {"nodes": 2}, "program": ["python3", HOSTILE_NL.replace("$", "$$")]}
    data.update(sections)
    return yaml.safe_dump(data, allow_unicode=True)


def test_env_prepend_append_keep_the_run_time_value_and_hostile_entries(fakes):
    entry = f"/opt/{HOSTILE}"  # no ':' (the separator) and no newline: both refused
    script = fakes.render(spec(env={
        "set": {"HOSTILE": HOSTILE_NL.replace("$", "$$")},
        "prepend": {"PATH": [entry.replace("$", "$$")], "HOSTILE_LIST": ["a", "b c"]},
        "append": {"LD_LIBRARY_PATH": ["/x y"], "HOSTILE_LIST": ["z"]}}))
    path = fakes.env["PATH"]
    fakes.env.pop("LD_LIBRARY_PATH", None)
    for before, after in ((None, "a:b c:z"), ("", "a:b c:z"), ("old", "a:b c:old:z")):
        fakes.env.pop("HOSTILE_LIST", None)
        if before is not None:
            fakes.env["HOSTILE_LIST"] = before
        done = fakes.run(script)
        assert done.returncode == 0, done.stderr  # srun, torchrun_jsc, python3 still found
        programs = fakes.records("python3")[-2:]
        assert len(programs) == 2
        for rec in programs:
            assert rec["argv"] == [HOSTILE_NL]
            assert rec["env"]["PATH"] == f"{entry}:{path}"
            assert rec["env"]["LD_LIBRARY_PATH"] == "/x y"
            assert rec["env"]["HOSTILE"] == HOSTILE_NL
            assert rec["env"]["HOSTILE_LIST"] == after
    assert not list(fakes.dir.parent.rglob("pwned*"))


def test_command_as_argv_reaches_each_node(fakes):
    script = fakes.render(spec(launch={"command": ["torchrun_jsc",
                                                   f"--log-dir={HOSTILE}".replace("$", "$$")]}))
    done = fakes.run(script)
    assert done.returncode == 0, done.stderr
    runs = fakes.records("torchrun_jsc")
    assert len(runs) == 2 and all(r["argv"][0] == f"--log-dir={HOSTILE}" for r in runs)
    assert runs[0]["argv"][1] == "--nnodes=2"


def test_mpi_plugin_reaches_srun(fakes):
    script = fakes.render(spec(site="jsc", launch={"mode": "horovod", "mpi_plugin": "pmi2",
                                                   "procs_per_node": 2}))
    done = fakes.run(script)
    assert done.returncode == 0, done.stderr
    (srun,) = fakes.records("srun")
    assert "--mpi=pmi2" in srun["argv"] and "--mpi=pmix" not in srun["argv"]
    assert len(fakes.records("python3")) == 4


@pytest.mark.parametrize("nodes, count", [(1, "1 node,"), (3, "3 nodes,")])
def test_log_lines_name_the_real_files(fakes, nodes, count):
    script = fakes.render(spec())
    done = fakes.run(script, nodes=nodes, SLURM_JOB_NAME=HOSTILE_NAME)
    assert done.returncode == 0, done.stderr
    assert f"job 4242: {count} rendezvous" in done.stdout
    assert (f"per-node logs: logs/{HOSTILE_NAME}-4242.nodeN.out (N = node index "
            f"0..{nodes - 1})\n") in done.stdout
    assert (fakes.dir / "logs").is_dir()
