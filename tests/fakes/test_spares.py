"""Ring 2: the spare-node supervisor (launcher/node/spares.py) with local stand-ins for srun,
squeue, scancel and sinfo (tests/helpers/sparefakes.py).

The stand-in srun runs each step here with SLURMD_NODENAME=NODE (from the --nodelist the
supervisor puts after srun); the heartbeats are real UDP datagrams over loopback. A node is
"lost" when its task stops its heartbeat process with SIGSTOP: the step still runs, the
heartbeats stop, as when a node's network is gone. The faults of tests/fakes/test_spare_faults.py
(a fabric cut, a blip, a stalled controller, forged heartbeats) use a relay for the fabric. The
real thing, a killed lab node, is tests/lab/test_spare_nodes.py.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from launcher.node import heartbeat
from tests.helpers import sparefakes

REPO = Path(__file__).resolve().parents[2]
RUN = [sys.executable, "-I", str(REPO / "launcher/node/run.py")]

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
    argv = [*RUN, "spares", "run", "42", "4", "127.0.0.1", train, spares, "--",
            "srun", *RUN, "spares", "beat", "--", sys.executable, "-c", TASK]
    full_env = {k: v for k, v in os.environ.items() if k != "REQUEUE_MARKER"}
    full_env.update(sparefakes.install(tmp_path / "fake"))
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


def beat_alone(tmp_path: Path, agent: str, host_timeout: float = 1.5):
    """A node's heartbeat (heartbeat.beat) with the test as its batch host: (process, socket,
    key); a stand-in scontrol and scancel record what the node calls."""
    import socket as socketlib

    for name in ("scontrol", "scancel"):
        (tmp_path / name).write_text('#!/bin/sh\necho "${0##*/} $*" >>"${0%/*}/called"\n')
        (tmp_path / name).chmod(0o755)
    sock = socketlib.socket(socketlib.AF_INET, socketlib.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(5)
    key = heartbeat.new_key()
    env = dict(os.environ, TORCHRUN_JSC_BEAT=f"127.0.0.1:{sock.getsockname()[1]}",
               TORCHRUN_JSC_BEAT_KEY=key, SLURM_JOB_ID="42", SLURMD_NODENAME="n2",
               TORCHRUN_JSC_HOST_LOST="requeue", PATH=f"{tmp_path}:{os.environ['PATH']}")
    code = ("import sys; from launcher.node.heartbeat import beat; "
            f"sys.exit(beat([sys.executable, '-c', {agent!r}], host_timeout={host_timeout}))")
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, env=env,
                            stderr=subprocess.PIPE, text=True)
    return proc, sock, key


def test_a_node_ends_the_job_when_the_batch_host_stops_answering(tmp_path):
    """The supervisor (here the test) answers two heartbeats, then goes silent as a dead batch
    host: after the host timeout the node requeues the job (a stand-in scontrol records it)
    and one line says why; the agent (a sleep) runs on until it ends by itself. An answer
    without the job's secret (a forged one, here between the two) does not count."""
    proc, sock, key = beat_alone(tmp_path, "import time; time.sleep(5)")
    for _ in range(2):
        data, addr = sock.recvfrom(512)
        kind, node, seq = heartbeat.unpack(key, data)
        assert (kind, node) == ("beat", "n2"), data
        sock.sendto(heartbeat.pack("0" * 32, "replaced", "n2", seq), addr)  # forged: ignored
        sock.sendto(heartbeat.pack(key, "ok", "n2", seq), addr)
    _, err = proc.communicate(timeout=60)
    sock.close()
    assert proc.returncode == 0, err
    assert re.search(r"^job 42: node n2: the batch host 127.0.0.1 has not answered for \d s at "
                     r".*: it is lost with the job's script and rendezvous store; requeueing "
                     r"the job \(scontrol requeue 42\)$", err, re.M), err
    assert (tmp_path / "called").read_text() == "scontrol requeue 42\n"


def test_a_replaced_node_ends_its_agent_and_never_ends_the_job(tmp_path):
    """The batch host answers "replaced" (the node's place went to a spare, and its step was not
    ended through Slurm): the heartbeat kills its agent (a long sleep) at once and ends; no
    scancel, no requeue, however long the batch host stays silent after. The agent has no
    share of the job's secret."""
    agent = ("import os, time; assert 'TORCHRUN_JSC_BEAT_KEY' not in os.environ; "
             "time.sleep(60)")
    proc, sock, key = beat_alone(tmp_path, agent)
    data, addr = sock.recvfrom(512)
    sock.sendto(heartbeat.pack(key, "ok", "n2", heartbeat.unpack(key, data)[2]), addr)
    data, addr = sock.recvfrom(512)
    sock.sendto(heartbeat.pack(key, "replaced", "n2", heartbeat.unpack(key, data)[2]), addr)
    _, err = proc.communicate(timeout=30)
    sock.close()
    assert proc.returncode == 128 + 9, err
    assert re.search(r"^spares beat: n2 was replaced by a spare at .*: its agent is ended here$",
                     err, re.M), err
    assert not (tmp_path / "called").exists()


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

def supervise_hangs(tmp_path: Path, hang: str, hold: str) -> subprocess.CompletedProcess:
    top = tmp_path / "hangs"
    (top / "progress").mkdir(parents=True)
    collector = [sys.executable, "-c", ""]
    argv = [*RUN, "spares", "run", "42", "30", "127.0.0.1", "n1,n2", "n3",
            "--hang", str(top), "2", "0.5", "1", str(len(collector)), *collector, "--",
            "srun", *RUN, "spares", "beat", "--", sys.executable, "-c", HANG_TASK]
    env = {k: v for k, v in os.environ.items() if k != "REQUEUE_MARKER"}
    env.update(sparefakes.install(tmp_path / "fake"))
    env.update(TORCHRUN_JSC_STACKS=str(top), HANG=hang, SPARE="n3", HOLD=hold)
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
    # its step ended through Slurm (SIGKILL to every process of it), by its id
    assert re.fullmatch(r"squeue -h -s -j 42 -o %i %N\nscancel --signal=KILL 42\.\d+\n",
                        sparefakes.called(tmp_path / "fake")), out
    assert re.search(r"^job 42: the step of n2 was ended through Slurm \(scancel --signal=KILL "
                     r"42\.\d+\)$", out, re.M), out


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
    assert sparefakes.called(tmp_path / "fake").startswith("scancel --signal=TERM 42\n")


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
