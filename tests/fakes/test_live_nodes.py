"""Ring 2: after a lost node every later step over the allocation runs on the live nodes only
(issue 41, item 5): launcher/node/job.sh, run by bash, with the real supervisor
(launcher/node/spares.py) and the stand-ins of tests/helpers/sparefakes.py (srun, squeue,
scancel, sinfo; an srun without ``--nodelist=`` is recorded in FAKE_DIR/called and does
nothing). The supervisor notes each node it retires in the batch script's file
(launcher/node/retired.py); the staged image's removal (the EXIT trap) and the stacks collector
of the SIGURG trap, fired while the supervisor still runs, leave that node out with counts to
match; with none lost their srun is the same as before. The file is gone after the job.

A node is lost as in tests/fakes/test_spares.py: its task stops its own heartbeat (SIGSTOP).
The tasks end when the test writes FAKE_DIR/release, after the trap's collector ran: no
sleeps.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from launcher import __version__, kit
from launcher.node import retired
from tests.helpers import sparefakes
from tests.helpers.sparefakes import wait_for

REPO = Path(__file__).resolve().parents[2]
RUN = [sys.executable, "-I", str(REPO / "launcher/node/run.py")]

# The agent's stand-in: says where it runs; on $LOSE it stops its heartbeat (the step runs on);
# every task ends once FAKE_DIR/release exists (the test's word), or after 60 s.
TASK = r"""
import os, signal, time
node = os.environ["SLURMD_NODENAME"]
os.write(1, ("TASK %s %d\n" % (node, os.getppid())).encode())
if os.environ.get("LOSE") == node:
    os.kill(os.getppid(), signal.SIGSTOP)
release = os.path.join(os.environ["FAKE_DIR"], "release")
t0 = time.time()
while not os.path.exists(release) and time.time() - t0 < 60:
    time.sleep(0.05)
"""

# As a jobscript with spares and runtime.stage: the allocation n1..n3 (n3 the spare), the
# staged copy's directory as jsc_stage leaves it, the stacks' traps, the launch in the
# background and waited for.
SCRIPT = """
hostnames=$'n1\\nn2\\nn3' nnodes=3 rdzv_host=127.0.0.1
jsc_spare_nodes 2
stage_dir="$PWD/stage" stage_image="$PWD/stage/image.sif" jsc_unstage_due=1
jsc_hangs_setup RANK
jsc_spares_launch 4 srun {task} &
jsc_wait_launch
echo "launch ended with $launch_rc"
"""


def run_job(tmp_path: Path, lose: str = ""):
    """The script above, SIGURG to it once the collector can be asked (after n2's loss when
    ``lose``), the tasks released once the trap's collector ran: (status, stdout, called)."""
    fake = tmp_path / "fake"
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir()
    task = " ".join(f"'{w}'" for w in [*RUN, "spares", "beat", "--", sys.executable, "-c"])
    script = (f'kit={kit.installed()}\nsource "$kit/node/job.sh" {__version__}\n'
              + SCRIPT.format(task=task + " \"$TASK\""))
    env = {k: v for k, v in os.environ.items() if k != "REQUEUE_MARKER"}
    env.update(sparefakes.install(fake))
    env.update(SLURM_JOB_ID="42", SLURMD_NODENAME="n1", TMPDIR=str(tmpdir), TASK=TASK,
               LOSE=lose)
    (tmp_path / "job").mkdir()
    with open(tmp_path / "out", "a") as out, open(tmp_path / "err", "a") as err:
        proc = subprocess.Popen(["bash", "-euc", script], stdout=out, stderr=err, env=env,
                                cwd=tmp_path / "job")
        files = lambda: sorted(tmpdir.iterdir())  # noqa: E731
        wait_for(lambda: len(files()) == 1, "the retired nodes' file", 30)
        path = files()[0]
        # the file: private to the user, named by the job
        assert path.name.startswith("torchrun-jsc-retired-42.") and \
            path.stat().st_mode & 0o777 == 0o600, path
        if lose:
            wait_for(lambda: retired.read(str(path)) == [lose], "the loss on record")
        wait_for(lambda: "TASK n2" in (tmp_path / "out").read_text(), "the steps to start")
        proc.send_signal(signal.SIGURG)  # the stacks trap, while the supervisor runs
        wait_for(lambda: "stacks node 42" in sparefakes.called(fake), "the trap's collector")
        (fake / "release").write_text("")
        rc = proc.wait(timeout=120)
    text = (tmp_path / "out").read_text()
    for line in text.splitlines():  # the lost node's stopped heartbeat, if still there
        words = line.split()
        if words[:2] == ["TASK", lose]:
            try:
                os.kill(int(words[2]), signal.SIGKILL)
            except ProcessLookupError:
                pass
    assert list(tmpdir.iterdir()) == [], "the retired nodes' file is left behind"
    return rc, text + (tmp_path / "err").read_text(), sparefakes.called(fake)


def srun_lines(called: str):
    return [line for line in called.splitlines() if line.startswith("srun ")]


def test_after_a_loss_unstaging_and_stacks_leave_the_lost_node_out(tmp_path):
    rc, out, called = run_job(tmp_path, lose="n2")
    assert rc == 0 and "launch ended with 0" in out, out
    assert "job 42: spare n3 takes the place of n2 (node rank 1; 0 spares left)" in out, out
    stage = tmp_path / "job" / "stage"
    collector, unstage = srun_lines(called)
    assert collector == (f"srun --overlap --jobid=42 --exclude=n2 --nodes=2 --ntasks=2 "
                         f"--ntasks-per-node=1 --cpus-per-task=1 --kill-on-bad-exit=0 python3 "
                         f"-I {kit.installed()}/node/run.py stacks node 42 10"), called
    assert unstage == (f"srun --overlap --kill-on-bad-exit=0 --exclude=n2 --nodes=2 --ntasks=2 "
                       f"--ntasks-per-node=1 --cpus-per-task=1 rm -rf -- {stage}"), called
    assert "job 42: stacks on 2 of 3 nodes (n2 lost)\n" in out, out
    assert "job 42: unstaging on 2 of 3 nodes (n2 lost)\n" in out, out
    assert f"job 42: staged image {stage}/image.sif removed on 2 nodes\n" in out, out


def test_with_no_loss_the_steps_span_the_allocation_as_before(tmp_path):
    rc, out, called = run_job(tmp_path)
    assert rc == 0 and "lost" not in out, out
    stage = tmp_path / "job" / "stage"
    assert srun_lines(called) == [
        f"srun --overlap --jobid=42 --nodes=3 --ntasks=3 --ntasks-per-node=1 --cpus-per-task=1 "
        f"--kill-on-bad-exit=0 python3 -I {kit.installed()}/node/run.py stacks node 42 10",
        f"srun --overlap --kill-on-bad-exit=0 --nodes=3 --ntasks=3 --ntasks-per-node=1 "
        f"--cpus-per-task=1 rm -rf -- {stage}"], called
    assert f"job 42: staged image {stage}/image.sif removed on 3 nodes\n" in out, out


def test_the_file_goes_when_the_job_fails_and_nothing_was_staged(tmp_path):
    """The EXIT trap removes the file after a failure (here: the script's own exit 3) and,
    with nothing staged, runs no srun."""
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir()
    script = (f'kit={kit.installed()}\nsource "$kit/node/job.sh" {__version__}\n'
              "hostnames=$'n1\\nn2\\nn3' nnodes=3\njsc_spare_nodes 2\n"
              'echo n2 >>"$jsc_retired_file"\njsc_live\n'
              'echo "live $live_nnodes ${live_where[*]} ($live_lost)"\nexit 3\n')
    env = dict(sparefakes.install(tmp_path / "fake"), SLURM_JOB_ID="43", TMPDIR=str(tmpdir))
    done = subprocess.run(["bash", "-euc", script], capture_output=True, text=True, env=env,
                          timeout=30, check=False)
    assert (done.returncode, done.stdout.splitlines()[-1]) == (3, "live 2 --exclude=n2 (n2)")
    assert list(tmpdir.iterdir()) == [] and srun_lines(sparefakes.called(tmp_path / "fake")) \
        == []


def test_only_whole_lines_naming_nodes_of_the_allocation_count(tmp_path):
    """jsc_live: a name twice counts once, a line still being written (no newline yet) and a
    name outside the allocation do not count at all."""
    path = tmp_path / "retired"
    path.write_text("n3\nn9\nn3\nn1")  # "n1" is being written
    script = (f'kit={kit.installed()}\nsource "$kit/node/job.sh" {__version__}\n'
              f"hostnames=$'n1\\nn2\\nn3' nnodes=3 jsc_retired_file={path}\njsc_live\n"
              'echo "$live_nnodes ${live_where[*]} ($live_lost)"\n')
    done = subprocess.run(["bash", "-euc", script], capture_output=True, text=True,
                          env={"PATH": os.environ["PATH"]}, timeout=30, check=False)
    assert (done.returncode, done.stdout) == (0, "2 --exclude=n3 (n3)\n"), done.stderr


WRITER = r"""
import sys
from launcher.node import retired
path, who, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
for i in range(count):
    assert retired.record(path, "%s-%04d-%s" % (who, i, "x" * 200))
"""


def test_concurrent_appends_stay_whole_lines(tmp_path):
    """Eight writers at once, 300 records each (long names: more than one small write's
    worth each): every line read back is one record, whole, none lost."""
    path = tmp_path / "retired"
    path.write_text("")
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), f"w{w}", "300"],
                              cwd=REPO) for w in range(8)]
    assert [p.wait(timeout=60) for p in procs] == [0] * 8
    lines = path.read_text().split("\n")
    assert lines[-1] == "" and len(lines) == 8 * 300 + 1
    want = {f"w{w}-{i:04d}-{'x' * 200}" for w in range(8) for i in range(300)}
    assert set(lines[:-1]) == want
