"""Ring 2: job.requeue's trap and verdict, run by bash with the recording fakes.

The fake program (tests/helpers/fake.py, FAKE_PROGRAM) plays the rank side: 'stop' writes
$REQUEUE_MARKER at once, 'wait_signal' only after the trap's scancel --signal.
"""

from __future__ import annotations

import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from tests.helpers.cluster import Cluster


@pytest.fixture
def fakes(tmp_path: Path) -> Cluster:
    return Cluster(tmp_path, "submit_dir")


def spec(mode: str = "torchrun", runtime: object = "bare", max_: int = 2) -> str:
    return yaml.safe_dump({"job": {"nodes": 2, "time": "10", "requeue": {"max": max_}},
                           "site": "jsc", "runtime": runtime, "launch": {"mode": mode},
                           "program": ["python3", "train.py"]})


def requeues(fakes: Cluster) -> list:
    return [r for r in fakes.records("scontrol") if r["argv"][:1] == ["requeue"]]


def test_checkpoint_marker_requeues_the_job(fakes):
    done = fakes.run(fakes.render(spec()), FAKE_PROGRAM="stop")
    assert done.returncode == 0, done.stderr
    assert [r["argv"] for r in requeues(fakes)] == [["requeue", "4242"]]
    assert "checkpointed: step 7 of 9" in done.stdout
    assert not (fakes.dir / ".requeue" / "4242.stopped").exists()


def test_maximum_is_honoured(fakes):
    done = fakes.run(fakes.render(spec(max_=2)), FAKE_PROGRAM="stop", SLURM_RESTART_COUNT="2")
    assert done.returncode == 75, done.stdout + done.stderr
    assert requeues(fakes) == []
    assert "requeued 2 times already" in done.stderr
    assert "attempt 3," in done.stdout


@pytest.mark.parametrize("name", ["SLURM_RESTART_COUNT", "SLURM_JOB_RESTART_COUNT"])
def test_maximum_is_honoured_with_either_restart_variable(fakes, name):
    """Slurm sets SLURM_RESTART_COUNT, psslurm (JSC) only SLURM_JOB_RESTART_COUNT: with
    either, the maximum stops the requeues (without it psslurm would requeue forever)."""
    script = fakes.render(spec(max_=2))
    done = fakes.run(script, FAKE_PROGRAM="stop", **{name: "2"})
    assert done.returncode == 75, done.stdout + done.stderr
    assert requeues(fakes) == [] and "attempt 3," in done.stdout
    done = fakes.run(script, FAKE_PROGRAM="stop", **{name: "1"})
    assert done.returncode == 0 and "attempt 2," in done.stdout
    assert [r["argv"] for r in requeues(fakes)] == [["requeue", "4242"]]


def test_slurms_restart_count_wins_over_psslurms(fakes):
    done = fakes.run(fakes.render(spec(max_=2)), FAKE_PROGRAM="stop",
                     SLURM_RESTART_COUNT="0", SLURM_JOB_RESTART_COUNT="5")
    assert done.returncode == 0 and "attempt 1," in done.stdout


def test_failure_is_not_requeued(fakes):
    done = fakes.run(fakes.render(spec()), FAKE_PROGRAM="stop", FAKE_PROGRAM_RC="3")
    assert done.returncode == 3
    assert requeues(fakes) == []
    assert "the program failed (exit 3): not requeued" in done.stderr


def test_finished_program_ends_the_job(fakes):
    done = fakes.run(fakes.render(spec()))
    assert done.returncode == 0 and "job 4242: finished" in done.stdout
    assert requeues(fakes) == []


@pytest.mark.parametrize("mode", ["torchrun", "srun"])
def test_trap_passes_the_signal_to_every_step_then_requeues(fakes, mode):
    """SIGUSR2 to the batch shell (--signal=B:USR2@T, or scancel -b): the trap interrupts the
    wait, signals every step with scancel, the ranks checkpoint, the job is requeued."""
    script = fakes.render(spec(mode=mode))
    env = dict(fakes.env, SLURM_JOB_ID="4242", SLURM_JOB_NAME="t", SLURM_JOB_NUM_NODES="2",
               SLURM_JOB_NODELIST="jwb[0001-0002]", SLURM_JOB_CPUS_PER_NODE="48(x2)",
               FAKE_PROGRAM="wait_signal")
    proc = subprocess.Popen(["bash", str(script)], cwd=fakes.dir, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while not fakes.records("python3"):  # the program runs: the trap is set, wait is on
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGUSR2)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, out + err
    assert [r["argv"] for r in fakes.records("scancel")] == [["--signal=USR2", "4242"]]
    assert [r["argv"] for r in requeues(fakes)] == [["requeue", "4242"]]
    # Human times (launcher/node/job.sh jsc_now), not epoch seconds.
    when = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \S+"
    assert re.search(rf"^job 4242: SIGUSR2 at {when}, passed on to every rank$", out, re.M), out
    assert re.search(rf"^job 4242: requeued at {when}$", out, re.M), out


@pytest.mark.parametrize("runtime", [
    {"kind": "enroot", "image": "img.sqsh"},
    {"kind": "pyxis", "image": "img.sqsh"},
    {"kind": "apptainer", "image": "img.sif"}])
@pytest.mark.parametrize("mode", ["torchrun", "srun"])
def test_requeue_variables_reach_the_program_in_every_runtime(fakes, runtime, mode):
    (fakes.dir / "img.sqsh").write_text("")
    (fakes.dir / "img.sif").write_text("")
    done = fakes.run(fakes.render(spec(mode=mode, runtime=runtime)), FAKE_PROGRAM="stop")
    assert done.returncode == 0, done.stdout + done.stderr
    # The program's runs (the task script's interface step is recorded as python3-net).
    programs = fakes.records("python3")
    assert len(programs) == 2  # one fake rank per node in both modes
    marker = str(fakes.dir / ".requeue" / "4242.stopped")
    for rec in programs:
        assert rec["env"]["REQUEUE_SIGNAL"] == "USR2"
        assert rec["env"]["REQUEUE_MARKER"] == marker
        assert rec["env"]["TORCHRUN_JSC_FORWARD_SIGNALS"] == "USR2"
    assert [r["argv"] for r in requeues(fakes)] == [["requeue", "4242"]]


def test_mpirun_modes_signal_mpirun_not_the_steps(fakes):
    """mpirun is the batch shell's child and forwards SIGUSR1/2 to its ranks; its orted
    daemons are a step that must not get the signal."""
    text = fakes.render(spec(mode="mpirun_torchrun")).read_text()
    assert "\njsc_requeue_setup USR2 2 kill  # " in text and "scancel" not in text  # kill -s


def test_refused_requeue_ends_with_how_to_resume(fakes):
    """A site that refuses `scontrol requeue`: the checkpoint is saved, the job ends with 75
    (not 0, which would read as done) and one line that says how to go on."""
    done = fakes.run(fakes.render(spec()), FAKE_PROGRAM="stop", FAKE_REQUEUE_REFUSED="1")
    assert done.returncode == 75, done.stdout + done.stderr
    assert [r["argv"] for r in requeues(fakes)] == [["requeue", "4242"]]
    assert "job 4242: scontrol requeue was refused: the checkpoint is saved; resume with: " \
           "sbatch this jobscript" in done.stderr
    assert ": requeued at" not in done.stdout


def test_preemption_that_slurm_requeues_is_left_to_slurm(fakes):
    """In the grace time of a preemption (PreemptTime set) on a partition with
    PreemptMode=REQUEUE, Slurm requeues the job when the script ends: the script checkpoints
    and exits 0 without a requeue of its own (one on top made Slurm requeue twice)."""
    done = fakes.run(fakes.render(spec()), FAKE_PROGRAM="stop", FAKE_PREEMPTED="REQUEUE",
                     SLURM_JOB_PARTITION="batch")
    assert done.returncode == 0, done.stdout + done.stderr
    assert requeues(fakes) == []
    assert "job 4242: preempted: Slurm requeues it (PreemptMode=REQUEUE)" in done.stdout
    partition = [r["argv"] for r in fakes.records("scontrol") if r["argv"][:2] == ["show", "partition"]]
    assert partition == [["show", "partition", "batch"]]


def test_preemption_without_slurms_requeue_requeues_itself(fakes):
    done = fakes.run(fakes.render(spec()), FAKE_PROGRAM="stop", FAKE_PREEMPTED="CANCEL",
                     SLURM_JOB_PARTITION="batch")
    assert done.returncode == 0, done.stdout + done.stderr
    assert [r["argv"] for r in requeues(fakes)] == [["requeue", "4242"]]
    assert "preempted" not in done.stdout


def test_preempted_ranks_that_died_are_not_called_a_failure(fakes):
    """A site that preempts with SIGTERM ends the ranks (exit 143): Slurm still requeues the
    job, so the script says so instead of "failed: not requeued"."""
    done = fakes.run(fakes.render(spec()), FAKE_PROGRAM="stop", FAKE_PROGRAM_RC="143",
                     FAKE_PREEMPTED="REQUEUE", SLURM_JOB_PARTITION="batch")
    assert done.returncode == 143 and requeues(fakes) == []
    assert "job 4242: preempted, the program ended with exit 143: Slurm requeues it " \
           "(PreemptMode=REQUEUE), from the last periodic checkpoint" in done.stdout
    assert "not requeued" not in done.stderr
