"""Ring 2: partial failures against the spare-node supervisor (launcher/node/spares.py), one
fault at a time, with stand-ins for srun, squeue, scancel and sinfo and a UDP relay as the
fabric (tests/helpers/sparefakes.py): a node whose fabric dies while it lives, a stalled Slurm
controller, a blip on most nodes at once, forged and replayed heartbeats. Each checks the
written contract (docs/guide/spare-nodes.md, the failure table): proven here with fakes; the
fabric row in the lab too (tests/lab/test_spare_nodes.py, cluster.sh fault fabric-down).

Heartbeat timeout 5 s (a Slurm command's timeout 5 s, the nodes' batch host timeout 25 s:
spares.limits): margin for a loaded machine, where a healthy heartbeat may come late (3 s was
too little beside `make test`'s lab lanes: a healthy batch host went quiet in the blip test).
The tasks wait for files the test writes when the event it waits for came.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from typing import Dict

from launcher.node import heartbeat, spares
from tests.helpers import sparefakes
from tests.helpers.sparefakes import Relay, wait_for

REPO = Path(__file__).resolve().parents[2]
RUN = [sys.executable, "-I", str(REPO / "launcher/node/run.py")]
TIMEOUT_S = 5
HOST_TIMEOUT_S = spares.limits(TIMEOUT_S, 4)[1]

# The agent's stand-in: says where it runs, leaves its pid, marks FAKE_DIR/joined on $SPARE,
# then waits for FAKE_DIR/done.
TASK = r"""
import os, time
node, top = os.environ["SLURMD_NODENAME"], os.environ["FAKE_DIR"]
rank = os.environ["TORCHRUN_JSC_NODE_RANK"]
with open(os.path.join(top, "pid." + node), "w") as f:
    f.write(str(os.getpid()))
print("TASK", node, rank, flush=True)
if node == os.environ.get("SPARE"):
    open(os.path.join(top, "joined"), "w").close()
while not os.path.exists(os.path.join(top, "done")):
    time.sleep(0.05)
print("DONE", node, flush=True)
"""


class Job:
    """The supervisor running in the background; its output in files."""

    def __init__(self, tmp_path: Path, train: str, spare: str, relay: bool = True,
                 cut=(), **env: str) -> None:
        self.fake = tmp_path / "fake"
        full_env = {k: v for k, v in os.environ.items() if k != "REQUEUE_MARKER"}
        full_env.update(sparefakes.install(self.fake))
        self.relay = Relay(self.fake, cut) if relay else None
        if self.relay:
            full_env["RELAY"] = self.relay.addr
        full_env.update(env)
        argv = [*RUN, "spares", "run", "42", str(TIMEOUT_S), "127.0.0.1", train, spare, "--",
                "srun", *RUN, "spares", "beat", "--", sys.executable, "-c", TASK]
        self.out_path, self.err_path = tmp_path / "out", tmp_path / "err"
        with open(self.out_path, "w") as out, open(self.err_path, "w") as err:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=err, env=full_env)

    def out(self) -> str:
        return self.out_path.read_text()

    def said(self, text: str) -> bool:
        return text in self.out()

    def pid(self, node: str) -> int:
        return int((self.fake / f"pid.{node}").read_text())

    def finish(self) -> int:
        (self.fake / "done").touch()
        rc = self.proc.wait(timeout=60)
        if self.relay:
            self.relay.close()
        return rc

    def clean(self) -> None:
        """After a failed test too: nothing of it left waiting or running."""
        for name in ("done", "release"):
            (self.fake / name).touch()
        if self.proc.poll() is None:
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        if self.relay:
            self.relay.close()

    def report(self) -> str:
        return (self.out() + self.err_path.read_text() + "\ncalled:\n" +
                sparefakes.called(self.fake))


@pytest.fixture
def start(tmp_path):
    """``start(train, spare, ...)``: a Job, cleaned up after the test whatever its outcome."""
    jobs = []

    def make(*args, **kwargs) -> Job:
        jobs.append(Job(tmp_path, *args, **kwargs))
        return jobs[-1]

    yield make
    for job in jobs:
        job.clean()


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"


def ended_job(called: str) -> bool:
    """Did anyone cancel or requeue the whole job (not one step of it)?"""
    return bool(re.search(r"^(scancel( --signal=\w+)? 42|scontrol requeue 42)$", called, re.M))


def test_a_node_whose_fabric_dies_is_ended_through_slurm_and_never_ends_the_job(start):
    """n2's fabric dies (the relay drops its heartbeats and the answers) while n2 lives and
    its step runs. Slurm says it responds; one node of two is silent: it is replaced, and its
    step ended through Slurm (scancel --signal=KILL of its step id) as the spare starts:
    its agent and its heartbeat die, so it never cancels or requeues the job afterwards. (Its
    probes by the batch host's own name are off here: Slurm alone ends it.)"""
    job = start("n1,n2", "n3", cut=["n2"], SPARE="n3", NO_VIA="1")
    wait_for(lambda: (job.fake / "joined").exists(), "the spare n3 to start")
    wait_for(lambda: gone(job.pid("n2")), "n2's agent to be killed through Slurm")
    rc = job.finish()
    out, called = job.out(), sparefakes.called(job.fake)
    assert rc == 0, job.report()
    lost = re.search(r"^job 42: node n2 lost at .*: no heartbeat for (\d+) s$", out, re.M)
    assert lost and int(lost.group(1)) >= TIMEOUT_S, out
    assert "job 42: spare n3 takes the place of n2 (node rank 1; 0 spares left)" in out, out
    assert re.search(r"^job 42: the step of n2 was ended through Slurm \(scancel --signal=KILL "
                     r"42\.\d+\)$", out, re.M), out
    assert "sinfo -h -N -n n2 -o %N %T\n" in called, called
    assert not ended_job(called), called
    assert "DONE n2" not in out and "DONE n1" in out and "DONE n3" in out, out


def test_a_stalled_controller_loses_no_healthy_node_and_ends_nothing(start):
    """Slurm's commands hang (sinfo, squeue, scancel: past their timeout, in a process that
    killing theirs does not end) for longer than the nodes' batch host timeout, while n3's
    fabric dies. The heartbeats go on being answered: n1 and n2 are never lost and never end
    the job; n3 is replaced without Slurm's word. Its step cannot be ended through Slurm, but
    its heartbeat asks by the other network (the batch host's own name), hears "replaced" and
    ends its agent: it never acts on the fabric's silence."""
    job = start("n1,n2,n3", "n4", cut=["n3"], SPARE="n4")
    (job.fake / "stall").touch()
    stalled = time.monotonic()
    wait_for(lambda: (job.fake / "joined").exists(), "the spare n4 to start")
    wait_for(lambda: gone(job.pid("n3")), "n3's agent to end")
    # the contract is about a span of time: the stall outlasts every node's batch host timeout
    wait_for(lambda: time.monotonic() > stalled + HOST_TIMEOUT_S + 2,
             "the stall to outlast the host timeout", timeout=HOST_TIMEOUT_S + 30)
    (job.fake / "release").touch()
    rc = job.finish()
    out, called = job.out(), sparefakes.called(job.fake)
    assert rc == 0, job.report()
    assert [line.split()[3] for line in out.splitlines() if " lost at " in line] == ["n3"], out
    assert "job 42: spare n4 takes the place of n3 (node rank 2; 0 spares left)" in out, out
    err = job.err_path.read_text()
    assert re.search(r"^spares beat: n3 was replaced by a spare at .*: its agent is ended here$",
                     err, re.M), job.report()
    assert "scancel" not in called and not ended_job(called), called
    assert "has not answered" not in err, job.report()


def test_a_blip_on_most_nodes_replaces_nothing(start):
    """The fabric of n2, n3 and n4 (3 of 4 training nodes) goes silent at once for longer than
    the heartbeat timeout, then comes back; Slurm says they respond. Nothing is replaced (the
    one spare is not burnt), one line says why, one that they beat again; the job completes."""
    job = start("n1,n2,n3,n4", "n5", cut=["n2", "n3", "n4"])
    wait_for(lambda: job.said("not replaced, waiting"), "the supervisor to hold")
    job.relay.restore()
    wait_for(lambda: job.said("every training node beats again"), "the beats to return")
    rc = job.finish()
    out, called = job.out(), sparefakes.called(job.fake)
    assert rc == 0, job.report()
    # why they are waited for: most nodes at once, or (on a loaded machine, where the healthy
    # batch host's own beat came late in the same look) the batch host's network; both hold
    assert re.search(r"^job 42: (3 of 4 training nodes silent at once \(n2, n3, n4; Slurm says "
                     r"they respond\): a fabric blip or the batch host's network, not the "
                     r"nodes|the batch host's own heartbeat \(n1\) is silent too: its network, "
                     r"not the nodes'): n\d(, n\d)* not replaced, waiting$", out, re.M), out
    assert "job 42: every training node beats again: nothing was replaced" in out, out
    assert "lost at" not in out and "TASK n5" not in out, out
    assert "squeue" not in called and "scancel" not in called, called
    assert [n for n in ("n1", "n2", "n3", "n4") if f"DONE {n}" in out] == \
        ["n1", "n2", "n3", "n4"], out


def test_slurm_saying_a_node_is_down_replaces_it_even_in_a_crowd(start):
    """n2 and n3 (2 of 3) go silent at once: a blip by count, but Slurm says n3 is down (not
    responding): n3 is replaced, n2 waited for until it beats again."""
    job = start("n1,n2,n3", "n4", cut=["n2", "n3"], SPARE="n4")
    (job.fake / "state.n3").write_text("down*")
    wait_for(lambda: (job.fake / "joined").exists(), "the spare n4 to start")
    wait_for(lambda: job.said("n2 not replaced, waiting"), "the supervisor to hold n2")
    job.relay.restore()
    wait_for(lambda: job.said("every training node beats again"), "n2 to beat again")
    rc = job.finish()
    out = job.out()
    assert rc == 0, job.report()
    assert "job 42: spare n4 takes the place of n3 (node rank 2; 0 spares left)" in out, out
    assert [line.split()[3] for line in out.splitlines() if " lost at " in line] == ["n3"], out
    assert "DONE n2" in out, out


def forge(relay: Relay, node: str, stop: threading.Event, sent: Dict[str, int]) -> None:
    """Datagrams for ``node`` straight to the supervisor: its own heartbeats as captured on
    the fabric (replayed), the same with a newer sequence (the MAC no longer fits), the old
    unauthenticated form, and a MAC under another key."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    seq = 10 ** 15
    while not stop.wait(0.1):
        captured = list(relay.captured.get(node, []))
        datagrams = list(captured)
        for data in captured:
            words = data.decode().split(" ")
            datagrams.append(" ".join([words[0], words[1], str(seq), words[3]]).encode())
        datagrams += [f"{node} 4242 {seq}".encode(),
                      heartbeat.pack("f" * 32, "beat", node, seq)]
        for data in datagrams:
            sock.sendto(data, relay.supervisor())
        sent["n"] = sent.get("n", 0) + len(datagrams)
        seq += 1
    sock.close()


def test_forged_and_replayed_heartbeats_do_not_keep_a_dead_node_alive(start):
    """n2's fabric dies; all the while a process on the fabric sends the supervisor
    heartbeats for n2: replays of n2's own, altered ones, unauthenticated ones. None counts:
    n2 is lost after the timeout and replaced, as without them."""
    job = start("n1,n2", "n3", cut=["n2"], SPARE="n3")
    wait_for(job.relay.cut_done.is_set, "n2's fabric to be cut")
    stop, sent = threading.Event(), {}
    forger = threading.Thread(target=forge, args=(job.relay, "n2", stop, sent), daemon=True)
    forger.start()
    wait_for(lambda: (job.fake / "joined").exists(), "the spare n3 to start")
    stop.set()
    forger.join(5)
    rc = job.finish()
    out = job.out()
    assert rc == 0, job.report()
    assert sent.get("n", 0) > 10, sent
    lost = re.search(r"^job 42: node n2 lost at .*: no heartbeat for (\d+) s$", out, re.M)
    assert lost and int(lost.group(1)) >= TIMEOUT_S, out
