"""Issue 36 item 3, ring 2: the writers of the start-up timeline, run as a job runs them: the
kit's launcher/node/job.sh (batch_start, step_start, launch_end) by bash, and one node's task
started through launcher/task/hook.sh (container_up) running the kit's torchrun_jsc (decided,
rendezvous_done) with 2 real gloo ranks through the kit's hook (workers_started,
process_group_up, first_collective); then `jsc-compose timeline` reads what they wrote.
The reader alone: tests/unit/test_timeline.py; a lab job's: tests/lab/test_hangs.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from launcher import cli, kit
from launcher.submit import timeline
from tests.fakes.test_hangs import job_sh

# A program spends time between its phases (building a model, its steps); the hook's thread
# looks every 10 ms, so a phase shorter than that may go unmarked.
PROGRAM = """
import time
import torch, torch.distributed as dist
dist.init_process_group("gloo")
time.sleep(0.2)
t = torch.ones(1)
dist.all_reduce(t)
time.sleep(0.2)
dist.destroy_process_group()
"""


def test_one_node_writes_every_phase_and_the_command_reads_them(tmp_path, capsys, monkeypatch):
    pytest.importorskip("torch")
    job, node = "4711", "jwbT"
    (tmp_path / "prog.py").write_text(PROGRAM)
    task = [sys.executable, str(kit.installed() / "task" / "run.py"), "torchrun_jsc",
            "--standalone", "--nproc_per_node=2", "--no_python", sys.executable,
            str(tmp_path / "prog.py")]
    # The batch script's part around the task, as a jobscript runs it (the launch in the
    # background, then jsc_wait_launch), the task started through the hook's prelude.
    script = ("jsc_hangs_setup RANK\n"
              'echo "pid $$"\n'
              + " ".join(["sh", f'"$kit/task/hook.sh"'] + [f"'{a}'" for a in task])
              + " >task.out 2>&1 &\njsc_wait_launch\n")
    done = job_sh(script, tmp_path, SLURM_JOB_ID=job, SLURMD_NODENAME=node,
                  OMP_NUM_THREADS="1", HOME=str(tmp_path))
    assert done.returncode == 0, done.stderr + (tmp_path / "task.out").read_text()
    # After the launch the node's file is folded into one per job (issue 43), the folder gone.
    assert not (tmp_path / ".timeline" / job).exists()
    folded = (tmp_path / ".timeline" / f"{job}.marks").read_text().splitlines()
    assert all(line.startswith(f"{node} ") for line in folded), folded
    lines = [line.split(" ", 1)[1] for line in folded]
    phases = [line.split()[1] for line in lines]
    # Every writer's line, in the order the phases happen (the ranks' two in any order). The
    # batch script stamps step_start just after it forked the launch: here the task starts at
    # once (no srun) and its container_up may come first (it did, on a loaded machine).
    assert phases[0] == "batch_start" and phases[3:5] == ["decided", "rendezvous_done"], lines
    assert sorted(phases[1:3]) == ["container_up", "step_start"], lines
    assert sorted(phases[5:-1]) == sorted(["workers_started", "process_group_up",
                                           "first_collective"] * 2), lines
    assert phases[-1] == "launch_end"
    times = [float(line.split()[0]) for line in lines]
    assert times[0] <= min(times[1:3]) and max(times[1:3]) <= times[3] <= times[4], lines
    assert times[-1] == max(times)
    assert {line.split(maxsplit=2)[2] for line in lines if "first_collective" in line} == \
        {"rank=0", "rank=1"}
    assert not (tmp_path / ".hangs" / job).exists()  # nothing to report: removed
    # The command, in the submit directory, on that job.
    monkeypatch.chdir(tmp_path)
    assert cli.main(["timeline", job]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"timeline of job {job}: 1 node, batch script started ")
    named = [line[len(node) + 2:len(node) + 24].strip() for line in out[2:10]]
    assert named[0] == "batch start" and sorted(named[1:3]) == ["container up", "step start"]
    assert named[3:] == ["torchrun_jsc decided", "rendezvous done", "workers started (2)",
                         "process group up (2)", "first collective (2)"], out
    assert out[10].startswith(f"slowest node: {node}, first collective at ")
    assert out[11].startswith("slowest phase: ")
    assert out[12] == f"picture: .timeline/{job}.svg (open it in a browser)"
    tl = timeline.read(job, str(tmp_path))
    assert [p for p, _, _ in tl.steps(node)] == [p for p, _ in timeline.NODE_PHASES]


def test_container_up_is_the_tasks_own_pid(tmp_path):
    """The prelude marks its own pid, which the task keeps (exec): the line names the process
    that then runs the program."""
    folder = tmp_path / "tl"
    folder.mkdir()
    done = subprocess.run(["sh", str(kit.installed() / "task" / "hook.sh"), sys.executable,
                           "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, timeout=60, env={"PATH": os.environ["PATH"],
                                                      "TORCHRUN_JSC_TIMELINE": str(folder),
                                                      "SLURMD_NODENAME": "jwb9.example"})
    assert done.returncode == 0, done.stderr
    (line,) = (folder / "jwb9").read_text().splitlines()  # the short name
    t, phase, who = line.split()
    assert (phase, who) == ("container_up", f"pid={done.stdout.strip()}")
    assert timeline.parse_line(line) == (float(t), "container_up", who)
    # Without the folder (a task outside a kit job): no mark, nothing else changes.
    done = subprocess.run(["sh", str(kit.installed() / "task" / "hook.sh"), "true"],
                          timeout=60, env={"PATH": os.environ["PATH"]})
    assert done.returncode == 0
    assert len(list(folder.iterdir())) == 1


def test_a_mark_that_cannot_be_written_fails_nothing(tmp_path):
    """A timeline folder that is gone (or read-only storage): the job goes on, silently."""
    done = job_sh("jsc_hangs_setup RANK\nrm -r \"$timeline_dir\"\njsc_mark step_start\n"
                  "echo ok", tmp_path, SLURM_JOB_ID="4712", SLURMD_NODENAME="jwbT")
    assert (done.returncode, done.stdout, done.stderr) == (0, "ok\n", "")
    done = subprocess.run(["sh", str(kit.installed() / "task" / "hook.sh"), "true"],
                          capture_output=True, text=True, timeout=60,
                          env={"PATH": os.environ["PATH"],
                               "TORCHRUN_JSC_TIMELINE": str(tmp_path / "gone")})
    assert (done.returncode, done.stderr) == (0, "")


def test_found_in_the_jobs_working_directory(tmp_path, capsys, monkeypatch):
    """Run anywhere: without the marks here, the job's WorkDir as Slurm records it (scontrol
    while it knows the job, else sacct), faked here as Slurm prints them."""
    submit = tmp_path / "my submit"  # a space in the path: sacct -P keeps it whole
    (submit / ".timeline" / "31").mkdir(parents=True)
    (submit / ".timeline" / "31" / "jwb0001").write_text("10.0 batch_start\n11.5 step_start\n")
    other = tmp_path / "sub"
    (other / ".timeline" / "32").mkdir(parents=True)
    (other / ".timeline" / "32" / "jwb0001").write_text("20.0 batch_start\n21.0 step_start\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(
        f"#!/bin/sh\n[ \"$4\" = 32 ] && echo 'JobId=32 JobName=x WorkDir={other} StdErr=/x'\n"
        "exit 0\n")
    (bin_dir / "sacct").write_text(f"#!/bin/sh\necho '{submit}'\n")
    for name in ("scontrol", "sacct"):
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["timeline", "32"]) == 0  # scontrol knows it (running)
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == f"picture: {other}/.timeline/32.svg (open it in a browser)"
    assert cli.main(["timeline", "31"]) == 0  # scontrol has forgotten it: sacct
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("timeline of job 31: 0 nodes, batch script started ")
    assert (submit / ".timeline" / "31.svg").is_file()


def test_after_the_launch_the_nodes_files_are_one_file(tmp_path):
    """Issue 43: .timeline/JOBID/ holds a file per node while the job runs; after the launch
    (jsc_after_launch) they are one file, .timeline/JOBID.marks, the folder gone; a requeued
    attempt starts afresh (both removed)."""
    nodes = [f"jwb{i:04d}" for i in range(1, 6)]
    marks = "".join(f'printf "1.5 container_up pid=7\\n2.5 decided\\n" >>"$timeline_dir/{n}"\n'
                    for n in nodes)
    done = job_sh("jsc_hangs_setup RANK\n" + marks + "launch_rc=0\njsc_after_launch\necho ok",
                  tmp_path, SLURM_JOB_ID="4713", SLURMD_NODENAME="jwb0001")
    assert (done.returncode, done.stdout, done.stderr) == (0, "ok\n", "")
    assert sorted(p.name for p in (tmp_path / ".timeline").iterdir()) == ["4713.marks"]
    lines = (tmp_path / ".timeline" / "4713.marks").read_text().splitlines()
    assert len(lines) == 2 * 5 + 2  # every node's two; the batch node's batch_start, launch_end
    assert {line.split()[0] for line in lines} == set(nodes)
    assert "jwb0003 2.5 decided" in lines and lines[1] == "jwb0001 1.5 container_up pid=7"
    assert lines[0].split()[2] == "batch_start" and lines[3].split()[2] == "launch_end"
    again = job_sh("jsc_hangs_setup RANK\necho ok", tmp_path, SLURM_JOB_ID="4713",
                   SLURMD_NODENAME="jwb0001")
    assert again.returncode == 0
    assert sorted(p.name for p in (tmp_path / ".timeline").iterdir()) == ["4713"]
