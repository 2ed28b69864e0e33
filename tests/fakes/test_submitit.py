"""Ring 2: launcher.submitit. executor_for with the real submitit (pinned in
requirements/launchers.txt) writes its sbatch file, and bash runs that file with the recording
fakes (tests/helpers/fake.py): every task gets its rank, the first node's inter-node name and
a socket interface before Python starts, inside the container."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

from launcher import kit
from launcher.model import SpecError
from tests.helpers import fake, need


# --- Ring 2 ---------------------------------------------------------------------------------

def run_submission(tmp_path: Path, monkeypatch, spec_text: str, python=None, files=(),
                   submit_name="submit dir", folder_name="sub mit", env=None):
    """executor_for on a spec file, then its sbatch file run by bash with the fakes (``env``:
    the job's variables changed)."""
    extra = dict(env or {})
    if importlib.util.find_spec("submitit") is None:
        need.missing("submitit is not installed in this venv (requirements/launchers.txt; "
                     "sudo make setup installs it)")
    from launcher.submitit import executor_for
    submit = tmp_path / submit_name
    submit.mkdir()
    for name in files:
        (submit / name).write_text("")
    (submit / "s.yaml").write_text(textwrap.dedent(spec_text))
    env = dict(os.environ, **fake.install(tmp_path / "bin", tmp_path / "log"))
    for key in ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "RANK", "MASTER_ADDR",
                "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
        env.pop(key, None)
    monkeypatch.setenv("PATH", env["PATH"])  # submitit looks for srun when it is created
    monkeypatch.chdir(submit)
    folder = tmp_path / folder_name / "%j"
    # The image check (apptainer exec on this machine) is proven in ring 1 and ring 3.
    executor = executor_for("s.yaml", str(folder), python=python, check_image=False)
    script = submit / "job.sh"
    script.write_text(executor._make_submission_file_text(executor._submitit_command_str, "u"))
    env.update(SLURM_JOB_ID="4242", SLURM_JOB_NUM_NODES="2", SLURM_JOB_NODELIST="jwb[0001-0002]",
               SLURM_NTASKS_PER_NODE="2", SLURM_JOB_CPUS_PER_NODE="48(x2)")
    env.update(extra)
    try:
        done = subprocess.run(["bash", str(script)], cwd=submit, env=env, capture_output=True,
                              text=True, timeout=120, check=False)
    finally:
        for path in fake.enroot_paths(env):  # the per-user Enroot data path (node-local /tmp)
            shutil.rmtree(path, ignore_errors=True)
    return done, fake.records(tmp_path / "log"), script.read_text(), folder


BARE = """\
job: {nodes: 2, partition: batch, time: "5"}
site: jsc
launch: {mode: srun, procs_per_node: 2}
program: [python3, x.py]
"""


def test_every_task_gets_rank_master_and_interface_before_python(tmp_path, monkeypatch):
    done, records, text, folder = run_submission(tmp_path, monkeypatch, BARE, python="python3")
    assert done.returncode == 0, done.stderr
    assert "#SBATCH --nodes=2" in text and "#SBATCH --ntasks-per-node=2" in text
    assert "#SBATCH --time=5" in text and "#SBATCH --exclusive" in text
    tasks = sorted((r for r in records if r["prog"] == "python3"),
                   key=lambda r: int(r["env"]["RANK"]))
    assert [r["argv"] for r in tasks] == [["-u", "-m", "submitit.core._submit", str(folder)]] * 4
    got = [(r["env"]["RANK"], r["env"]["LOCAL_RANK"], r["env"]["WORLD_SIZE"], r["env"]["NODE_RANK"])
           for r in tasks]
    assert got == [("0", "0", "4", "0"), ("1", "1", "4", "0"), ("2", "0", "4", "1"),
                   ("3", "1", "4", "1")]
    for r in tasks:
        assert (r["env"]["MASTER_ADDR"], r["env"]["MASTER_PORT"]) == ("jwb0001i", "29742")
        assert r["env"]["GLOO_SOCKET_IFNAME"] == "ib0"  # the shipped rule, on the fake network
        assert r["env"]["NCCL_SOCKET_IFNAME"] == "=ib0"
        assert r["env"]["SRUN_CPUS_PER_TASK"] == "24"
    # The interface was picked by the kit's rule, run from the kit by path in every task.
    nets = [r for r in records if r["prog"] == "python3-net"]
    assert len(nets) == 4 and {r["run"] for r in nets} == {str(kit.installed() / "node/run.py")}
    # The set-up sources the kit's functions, from the kit of this render (absolute).
    assert f"kit={kit.installed()}\n" in text


def test_no_first_node_stops_the_job_before_python(tmp_path, monkeypatch):
    """submitit's set-up runs without set -e: a node list without a first node must still end
    the job there, with one line, before any task starts (as the jobscript does)."""
    done, records, _, _ = run_submission(tmp_path, monkeypatch, BARE, python="python3",
                                         env={"SLURM_JOB_NODELIST": ""})
    assert "no first node in SLURM_JOB_NODELIST" in done.stderr
    assert done.returncode != 0
    assert not [r for r in records if r["prog"] in ("srun", "python3")], records


def test_apptainer_tasks_run_python_in_the_image_with_the_folder_bound(tmp_path, monkeypatch):
    spec_text = BARE.replace("site: jsc", "site: jsc\nruntime: {kind: apptainer, "
                                          "image: my img.sif}")
    done, records, _, folder = run_submission(tmp_path, monkeypatch, spec_text,
                                              files=["my img.sif"])
    assert done.returncode == 0, done.stderr
    containers = [r for r in records if r["prog"] == "apptainer"]
    assert len(containers) == 4
    root = str(folder.parent)
    for r in containers:
        kit_dir = str(kit.installed())  # the kit, read-only at its own path
        assert r["argv"] == ["exec", "--bind", f"{kit_dir}:{kit_dir}:ro", "--bind",
                             f"{root}:{root}", "--bind",
                             str(tmp_path / "submit dir"), "my img.sif", "python3", "-u", "-m",
                             "submitit.core._submit", str(folder)]
        assert r["env"]["MASTER_ADDR"] == "jwb0001i" and r["env"]["WORLD_SIZE"] == "4"
    assert sorted(r["env"]["RANK"] for r in records if r["prog"] == "python3") == \
        ["0", "1", "2", "3"]


def test_enroot_tasks_get_their_ranks_and_submitits_variables_inside(tmp_path, monkeypatch):
    spec_text = BARE.replace("site: jsc", "site: jsc\nruntime: {kind: enroot, image: i.sqsh}")
    done, records, _, folder = run_submission(tmp_path, monkeypatch, spec_text,
                                              files=["i.sqsh"], submit_name="submit_dir",
                                              folder_name="submitit")
    assert done.returncode == 0, done.stdout + done.stderr
    creates = [r for r in records if r["prog"] == "enroot" and r["argv"][:1] == ["create"]]
    starts = [r for r in records if r["prog"] == "enroot" and r["argv"][:1] == ["start"]]
    assert len(creates) == 1 and len(starts) == 4  # created once (the fake nodes share /tmp)
    root = str(folder.parent)
    for r in starts:
        pairs = [r["argv"][i:i + 2] for i in range(len(r["argv"]))]
        assert ["--mount", f"{root}:{root}"] in pairs
        assert ["--env", "SUBMITIT_EXECUTOR"] in pairs
    tasks = [r for r in records if r["prog"] == "python3"]
    assert sorted(r["env"]["RANK"] for r in tasks) == ["0", "1", "2", "3"]
    for r in tasks:
        assert r["argv"] == ["-u", "-m", "submitit.core._submit", str(folder)]
        assert (r["env"]["MASTER_ADDR"], r["env"]["WORLD_SIZE"]) == ("jwb0001i", "4")


def test_a_bad_spec_never_reaches_submitit(tmp_path, monkeypatch):
    from launcher.submitit import executor_for
    (tmp_path / "bad.yaml").write_text("job: {nodes: 0}\nprogram: [x]\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SpecError) as err:
        executor_for("bad.yaml", str(tmp_path / "f"))
    assert str(err.value).startswith("bad.yaml: job.nodes: ")
