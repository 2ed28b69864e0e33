"""Ring 2: the spare-node supervisor (launcher/node/spares.py) with a local stand-in for srun.

The stand-in runs each step here with SLURMD_NODENAME=NODE (from the --nodelist the supervisor
puts after srun); the heartbeats are real UDP datagrams over loopback. A node is "lost" when its
task stops its heartbeat process with SIGSTOP: the step still runs, the heartbeats stop, as
when a node's network is gone. The real thing, a killed lab node, is tests/lab/test_spare_nodes.py.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RUN = [sys.executable, "-I", str(REPO / "launcher/node/run.py")]

FAKE_SRUN = """#!/bin/bash
# srun --nodelist=NODE ARGV...: the step, here, on "NODE", in a process group of its own that
# SIGTERM ends (the real srun passes it to the step's tasks); on a node in $DEAD none starts
# (srun: error: Node failure) and srun ends with 0, as Slurm 24.11's did in the lab
node=${1#--nodelist=}; shift
if [[ " ${DEAD:-} " == *" $node "* ]]; then echo "srun: error: Node failure on $node" >&2; exit 0; fi
SLURMD_NODENAME="$node" setsid "$@" &
step=$!
trap 'kill -KILL -- "-$step"' TERM
wait "$step"
wait "$step"
"""

# The agent's stand-in: prints its node and slot; LOSE (a node name) stops its own heartbeat
# there; FAIL=NODE:STATUS ends there with STATUS; else it runs for HOLD seconds.
TASK = r"""
import os, signal, sys, time
node, rank = os.environ["SLURMD_NODENAME"], os.environ["TORCHRUN_JSC_NODE_RANK"]
line = ["TASK", node, rank, os.environ.get("TORCH_DISABLE_SHARE_RDZV_TCP_STORE"), os.getppid()]
os.write(1, (" ".join(map(str, line)) + "\n").encode())  # one write: the tasks share the file
if os.environ.get("LOSE") == node:
    os.kill(os.getppid(), signal.SIGSTOP)  # the heartbeat stops, the step runs on
fail_node, _, status = os.environ.get("FAIL", "").partition(":")
if fail_node == node:
    sys.exit(int(status))
time.sleep(float(os.environ.get("HOLD", "3")))
"""


def supervise(tmp_path: Path, train: str, spares: str, **env: str) -> subprocess.CompletedProcess:
    srun = tmp_path / "srun"
    srun.write_text(FAKE_SRUN)
    srun.chmod(0o755)
    argv = [*RUN, "spares", "run", "42", "4", "127.0.0.1", train, spares, "--",
            str(srun), *RUN, "spares", "beat", "--", sys.executable, "-c", TASK]
    full_env = {k: v for k, v in os.environ.items() if k != "REQUEUE_MARKER"}
    full_env.update(env)
    # Output to files, not pipes: the lost node's stopped heartbeat keeps them open. Appended
    # (O_APPEND), and each task writes its line in one write(2): lines of several tasks never
    # interleave (they did: "TASKTASK  n1n2  01 ...", CI of issue 42).
    with open(tmp_path / "out", "a") as out, open(tmp_path / "err", "a") as err:
        proc = subprocess.Popen(argv, stdout=out, stderr=err, env=full_env)
        rc = proc.wait(timeout=120)
    p = subprocess.CompletedProcess(argv, rc, (tmp_path / "out").read_text(),
                                    (tmp_path / "err").read_text())
    for line in p.stdout.splitlines():  # the lost node's stopped heartbeat: ours to end
        words = line.split()
        if words[:2] == ["TASK", env.get("LOSE")]:
            try:
                os.kill(int(words[-1]), signal.SIGKILL)
            except ProcessLookupError:  # the stand-in for srun ended it
                pass
    return p


def test_a_silent_node_is_replaced_by_the_spare_in_its_slot(tmp_path):
    (tmp_path / "timeline").mkdir()
    p = supervise(tmp_path, "n1,n2", "n3", LOSE="n2", SLURMD_NODENAME="n1",
                  TORCHRUN_JSC_TIMELINE=str(tmp_path / "timeline"))
    out = p.stdout
    assert p.returncode == 0, out + p.stderr
    assert "TASK n1 0 1 " in out and "TASK n2 1 1 " in out, out
    lost = [line for line in out.splitlines() if "lost at" in line]
    assert len(lost) == 1 and lost[0].startswith("job 42: node n2 lost at "), out
    # not before the timeout (4 s); how soon after it is the recovery bench's to say
    silent = re.search(r": no heartbeat for (\d+) s$", lost[0])  # the time in any zone
    assert silent and 4 <= int(silent.group(1)) <= 30, out
    assert "job 42: spare n3 takes the place of n2 (node rank 1; 0 spares left)" in out, out
    assert "TASK n3 1 1 " in out, out  # the spare in the lost node's slot, rank 1
    # the recovery on the job's timeline, in the batch host's file (jsc-compose timeline)
    marks = [line.split()[1:] for line in (tmp_path / "timeline" / "n1").read_text().splitlines()]
    assert marks == [["node_lost", "n2"], ["spare_started", "n3"]], marks


def test_no_spare_left_writes_the_requeue_marker_and_stops_the_others(tmp_path):
    marker = tmp_path / "stopped"
    p = supervise(tmp_path, "n1,n2", "", LOSE="n2", HOLD="60", REQUEUE_MARKER=str(marker))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "job 42: node n2 lost at " in p.stdout, p.stdout
    assert "no spare left for n2: the steps of the other nodes were stopped" in p.stdout
    assert marker.read_text() == ("node n2 lost, no spare left: resumed from the last periodic "
                                  "checkpoint\n")


def test_no_spare_and_no_requeue_ends_the_job_with_1(tmp_path):
    p = supervise(tmp_path, "n1,n2", "", LOSE="n2", HOLD="60")
    assert p.returncode == 1, p.stdout + p.stderr
    assert "no spare left for n2 (job.requeue not set: the job ends)" in p.stdout, p.stdout


def test_a_failed_step_ends_the_others_with_its_status(tmp_path):
    p = supervise(tmp_path, "n1,n2", "n3", FAIL="n2:3", HOLD="60")
    assert p.returncode == 3, p.stdout + p.stderr
    assert "job 42: the step on n2 ended with status 3" in p.stdout, p.stdout
    assert "lost at" not in p.stdout and "TASK n3" not in p.stdout, p.stdout


def test_beat_passes_the_agents_status_on_and_survives_the_steps_signals(tmp_path):
    code = ("import os, signal, time; os.kill(os.getppid(), signal.SIGUSR2); "
            "os.kill(os.getppid(), signal.SIGTERM); time.sleep(0.5); raise SystemExit(7)")
    p = subprocess.run([*RUN, "spares", "beat", "--", sys.executable, "-c", code],
                       capture_output=True, text=True, timeout=60, check=False)
    assert p.returncode == 7, p.stderr


def test_usage_error_is_one_line():
    p = subprocess.run([*RUN, "spares", "run", "42"], capture_output=True, text=True,
                       timeout=60, check=False)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "usage:" in p.stderr, p.stderr


def test_a_spare_whose_step_never_started_is_lost_too(tmp_path):
    """n2 goes silent; the spare n3 is dead as well (its srun ends at once, status 0, no
    heartbeat ever): lost too; n4 takes the slot."""
    p = supervise(tmp_path, "n1,n2", "n3,n4", LOSE="n2", DEAD="n3")
    out = p.stdout
    assert p.returncode == 0, out + p.stderr
    assert "job 42: spare n3 takes the place of n2 (node rank 1; 1 spare left)" in out, out
    assert re.search(r"job 42: node n3 lost at .*: its step ended \(status 0\) before its "
                     r"first heartbeat", out), out
    assert "job 42: spare n4 takes the place of n3 (node rank 1; 0 spares left)" in out, out
    assert "TASK n4 1 1 " in out, out


def test_a_node_ends_the_job_when_the_batch_host_stops_answering(tmp_path):
    """The supervisor (here the test) answers two heartbeats, then goes silent as a dead batch
    host: after the host timeout the node requeues the job (a stand-in scontrol records it)
    and one line says why; the agent (a sleep) runs on until it ends by itself."""
    import socket as socketlib

    (tmp_path / "scontrol").write_text('#!/bin/sh\necho "$@" >>"${0%/*}/called"\n')
    (tmp_path / "scontrol").chmod(0o755)
    sock = socketlib.socket(socketlib.AF_INET, socketlib.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(5)
    env = dict(os.environ, TORCHRUN_JSC_BEAT=f"127.0.0.1:{sock.getsockname()[1]}",
               SLURM_JOB_ID="42", SLURMD_NODENAME="n2", TORCHRUN_JSC_HOST_LOST="requeue",
               PATH=f"{tmp_path}:{os.environ['PATH']}")
    code = ("import sys; from launcher.node.spares import beat; "
            "sys.exit(beat([sys.executable, '-c', 'import time; time.sleep(5)'], "
            "host_timeout=1.5))")
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, env=env,
                            stderr=subprocess.PIPE, text=True)
    for _ in range(2):
        data, addr = sock.recvfrom(512)
        assert data.decode().startswith("n2 "), data
        sock.sendto(b"ok", addr)
    _, err = proc.communicate(timeout=60)
    sock.close()
    assert proc.returncode == 0, err
    assert re.search(r"^job 42: node n2: the batch host 127.0.0.1 has not answered for \d s at "
                     r".*: it is lost with the job's script and rendezvous store; requeueing "
                     r"the job \(scontrol requeue 42\)$", err, re.M), err
    assert (tmp_path / "called").read_text() == "requeue 42\n"


# --- launch.hang_action replace: the supervisor runs the progress deadline ------------------

# The agent's stand-in for a hang: one rank per node (its node rank), marking its collectives
# in progress/marks.NODE as the hook does. On $HANG it stops after 3 (alive: still beating);
# the others wait "in the collective" after 5 until a spare ($SPARE) has started, then go on
# to 20 and end with 0. A rank that cannot go on ends by itself after HOLD s.
HANG_TASK = r"""
import os, sys, time
node, rank = os.environ["SLURMD_NODENAME"], int(os.environ["TORCHRUN_JSC_NODE_RANK"])
top = os.environ["TORCHRUN_JSC_STACKS"]
os.write(1, ("TASK %s %d\n" % (node, rank)).encode())  # one write: the tasks share the stream
path = os.path.join(top, "progress", "marks." + node)
def mark(n):
    line = "rank=%d world=%d all=%d calls=0 t=%.3f state=run" % (rank, n, n, time.time())
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    os.pwrite(fd, (line.ljust(127) + "\n").encode(), 0)
    os.close(fd)
joined = os.path.join(top, "joined")
if node == os.environ.get("SPARE"):
    open(joined, "w").close()
n, t0 = 0, time.time()
mark(n)
while n < 20:
    time.sleep(0.1)
    if time.time() - t0 > float(os.environ["HOLD"]):
        sys.exit(0)
    if node == os.environ.get("HANG") and n >= 3:
        continue
    if n >= 5 and not os.path.exists(joined):
        continue
    n += 1
    mark(n)
"""

SLURM_STANDINS = """#!/bin/sh
echo "${0##*/} $*" >>"${0%/*}/called"
"""


def supervise_hangs(tmp_path: Path, hang: str, hold: str) -> subprocess.CompletedProcess:
    top = tmp_path / "hangs"
    (top / "progress").mkdir(parents=True)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("squeue", "scancel"):  # squeue lists no step: the hung one ends by its srun
        (bin_dir / name).write_text(SLURM_STANDINS)
        (bin_dir / name).chmod(0o755)
    srun = tmp_path / "srun"
    srun.write_text(FAKE_SRUN)
    srun.chmod(0o755)
    collector = [sys.executable, "-c", ""]
    argv = [*RUN, "spares", "run", "42", "30", "127.0.0.1", "n1,n2", "n3",
            "--hang", str(top), "2", "0.5", "1", str(len(collector)), *collector, "--",
            str(srun), *RUN, "spares", "beat", "--", sys.executable, "-c", HANG_TASK]
    env = {k: v for k, v in os.environ.items() if k != "REQUEUE_MARKER"}
    env.update(PATH=f"{bin_dir}:{os.environ['PATH']}", TORCHRUN_JSC_STACKS=str(top),
               HANG=hang, SPARE="n3", HOLD=hold)
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120,
                          check=False)


def test_a_hung_node_is_replaced_by_the_spare_after_the_deadline(tmp_path):
    """n2 stops after 3 collectives, n1 waits for it after 5: the deadline (2 s) names n2,
    the supervisor ends its step and starts the spare in its slot, the job completes; the
    deadline starts again for the new round, which does not hang."""
    p = supervise_hangs(tmp_path, "n2", "30")
    out = p.stdout
    assert p.returncode == 0, out + p.stderr
    assert re.search(r"^job 42: no progress for [23] s \(launch.hang_timeout 2\) at ", out,
                     re.M), out
    assert ("job 42: no progress for 2 s: rank 1 on ?: no stack (process state ?), "
            "2 collectives behind the other 1\n") in out, out
    assert re.search(r"^job 42: node n2 hung at .* \(no progress for [23] s, its stacks "
                     r"above\): replaced by spare n3 \(node rank 1; 0 spares left\)$", out,
                     re.M), out
    assert out.count("no progress for") == 3 and "the job ends" not in out, out
    assert "TASK n3 1" in out, out
    assert not (tmp_path / "hangs" / "no-progress").exists()
    assert (tmp_path / "bin" / "called").read_text() == "squeue -h -s -j 42 -o %i %N\n"


def test_a_hung_batch_host_ends_the_job_as_without_replace(tmp_path):
    """n1 (node rank 0: the script, the store) is the one behind: one line says why it is not
    replaced, the verdict is written and the job's steps are ended as without replace."""
    p = supervise_hangs(tmp_path, "n1", "8")
    out = p.stdout
    assert re.search(r"^job 42: launch.hang_action replace: node n1 is behind, and it is the "
                     r"batch host \(the job's script and rendezvous store\): it cannot be "
                     r"replaced: the job ends$", out, re.M), out
    assert "TASK n3" not in out and "hung at" not in out, out
    assert (tmp_path / "hangs" / "no-progress").read_text().startswith(
        "no progress for 2 s: rank 0 on ?: no stack (process state ?), 2 collectives behind "
        "the other 1; job ended"), out
    assert (tmp_path / "bin" / "called").read_text().startswith("scancel --signal=TERM 42\n")


def test_the_jobscript_hands_the_deadline_to_the_supervisor(tmp_path):
    """launcher/node/job.sh, run by bash: ``jsc_watch ... replace`` starts no watcher of its
    own but hands its arguments (with the collector's, counted) to ``jsc_spares_launch``;
    without it the supervisor gets none (bash -u: an empty array); a line the supervisor's
    watcher left ends the script with 124 as the watcher's does."""
    from tests.fakes.test_hangs import job_sh

    hangs = tmp_path / ".hangs" / "79"
    (hangs / "fr").mkdir(parents=True)
    script = """python3() { printf '%s\\n' "$@" >>"$PWD/argv"; printf '=END=\\n' >>"$PWD/argv"; }
nnodes=3 rdzv_host=jwb0001i train_nodes=jwb0001,jwb0002 spare_nodes=jwb0003
jsc_spares_launch 10 srun --nodes=1 prog
jsc_watch 130 13 30 replace
[ -z "${jsc_watch_pid:-}" ] || exit 9
jsc_spares_launch 10 srun --nodes=1 prog
echo 'no progress for 130 s: the job ended' >"$hangs_dir/no-progress"
launch_rc=143
jsc_after_launch
"""
    done = job_sh(script, tmp_path, hangs_dir=str(hangs), SLURM_JOB_ID="79")
    assert (done.returncode, done.stderr) == (124, "no progress for 130 s: the job ended\n")
    plain, hanged = (tmp_path / "argv").read_text().split("\n=END=\n")[:2]
    run_py = plain.splitlines()[1]
    assert plain.splitlines() == ["-I", run_py, "spares", "run", "79", "10", "jwb0001i",
                                  "jwb0001,jwb0002", "jwb0003", "--", "srun", "--nodes=1",
                                  "prog"]
    collector = ["srun", "--overlap", "--jobid=79", "--nodes=3", "--ntasks=3",
                 "--ntasks-per-node=1", "--cpus-per-task=1", "--kill-on-bad-exit=0", "python3",
                 "-I", run_py, "stacks", "node", "79", "10"]
    assert hanged.splitlines() == [
        "-I", run_py, "spares", "run", "79", "10", "jwb0001i", "jwb0001,jwb0002", "jwb0003",
        "--hang", str(hangs), "130", "13", "30", str(len(collector)), *collector,
        "--", "srun", "--nodes=1", "prog"]
