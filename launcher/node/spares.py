"""Spare nodes (job.spare_nodes): a lost node found by heartbeat and replaced by a spare.

Where it sits: the jobscript (torchrun mode with spares) runs ``spares run`` in the batch shell
on the batch host instead of one srun across all nodes. It starts one srun step per training
node (``--nodelist=NODE`` put after ``srun``), each task ``spares beat -- AGENT...``, and
listens for their heartbeats (UDP, one datagram a second from each node to the batch host).
A node whose step still runs but whose heartbeat stopped for TIMEOUT s is lost: one line in the
job log, and a spare's step is started in its place. torch's c10d rendezvous (its store in the
agent on the batch host, node 0) drops the silent agent after its keep-alive (3 x 5 s); the
spare's agent then waits to join, the surviving agents restart their workers for the new round
(a membership change: it costs none of --max_restarts) and the program resumes from its last
checkpoint through its own resume path. The job must run with ``sbatch --no-kill``, so that
Slurm, when it marks the node down (SlurmdTimeout), ends that node's step and not the job.

When no spare is left: with job.requeue ($REQUEUE_MARKER set) the marker says why, the steps
end and the jobscript's verdict requeues (the program resumes from its last periodic
checkpoint); without, the job ends with status 1. The batch host itself (node 0: the batch
script, this supervisor and the rendezvous store) cannot be replaced: Slurm ends the job with
it, and requeues it where job.requeue is set.

    python3 -I KIT/node/run.py spares run JOB TIMEOUT TRAIN SPARES -- SRUN... (batch host)
    python3 -I KIT/node/run.py spares beat -- ARGV...  (each node's task, before the agent)

TRAIN and SPARES: comma-separated node names. Exit status of ``run``: 0 when every training
step ended with 0 (or the marker was written), else the first failed step's status, 1 when a
node was lost with no spare left and no requeue. Standard library only, Python >= 3.6.
"""

import os
import select
import signal
import socket
import subprocess
import sys
import time

from launcher.node.stacks import time_text

BEAT_ENV = "TORCHRUN_JSC_BEAT"  # HOST:PORT the heartbeats go to, set for the steps by ``run``
NODE_RANK_ENV = "TORCHRUN_JSC_NODE_RANK"  # the slot's node rank (0: the batch host, the store)
BEAT_EVERY_S = 1.0
HOST_TIMEOUT_S = 30.0  # no answer from the batch host for this long: it is lost
HOST_LOST_ENV = "TORCHRUN_JSC_HOST_LOST"  # requeue | cancel: what a node does then
START_GRACE_S = 60.0  # a step's first heartbeat may come this much later (srun, the node's python3)
STOP_WAIT_S = 30.0  # how long the others' steps get to end after SIGTERM
POLL_S = 0.25


TIMELINE_ENV = "TORCHRUN_JSC_TIMELINE"  # the job's timeline folder (launcher/node/job.sh)


def log(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def timeline_mark(phase, who, when, env=os.environ):
    """One line "TIME PHASE WHO" on the batch host's file of the job's start-up timeline
    (docs/guide/timeline.md; launcher/submit/timeline.py reads it): node_lost NODE,
    spare_started NODE. Never fails the job."""
    folder = env.get(TIMELINE_ENV)
    if not folder:
        return
    node = (env.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]).replace("/", "_")
    try:
        with open(os.path.join(folder, node), "a") as f:
            f.write("%.3f %s %s\n" % (when, phase, who))
    except OSError:
        pass


# --- each node: the heartbeat ---------------------------------------------------------------

def _ignore(signum, frame):
    """Signals for the step reach every process of it (slurmstepd's proctrack): the agent gets
    them itself. The heartbeat must not die of one (SIGUSR2 of job.requeue, SIGTERM while the
    agent stops its workers): it ends when the agent ends. A handler, not SIG_IGN: a handler
    is reset at exec, so the agent gets the default dispositions."""


def beat(argv, env=None, host_timeout=None):
    """Run ARGV as a child; send this node's name to $TORCHRUN_JSC_BEAT every second while it
    runs; return its exit status (128 + N for a signal N).

    The supervisor answers every heartbeat. Once it answered and then stayed silent for
    HOST_TIMEOUT_S, the batch host is lost: Slurm keeps a --no-kill job whose batch host died
    RUNNING without its batch script until the time limit (lab, Slurm 24.11: "Removing
    failed node jwb0001 from JobId=42"), so this node ends it: ``scontrol requeue`` where
    $TORCHRUN_JSC_HOST_LOST is ``requeue`` (job.requeue with requeues left), else
    ``scancel``. Every node does it; the first one wins, the others find the job gone."""
    env = os.environ if env is None else env
    host_timeout = HOST_TIMEOUT_S if host_timeout is None else host_timeout
    host, _, port = env.get(BEAT_ENV, "").rpartition(":")
    node = env.get("SLURMD_NODENAME") or socket.gethostname()
    for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2,
                signal.SIGALRM, signal.SIGURG):
        signal.signal(sig, _ignore)
    target = None
    if host and port.isdigit():
        try:
            target = socket.getaddrinfo(host.strip("[]"), int(port), 0, socket.SOCK_DGRAM)[0]
        except OSError as e:
            sys.stderr.write("spares beat: cannot resolve {} ({}): no heartbeat from {}\n".format(
                host, e, node))
    sock = socket.socket(target[0], socket.SOCK_DGRAM) if target else None
    state = {"seq": 0, "sent": 0.0, "answered": None, "acted": False}

    def send():
        state["sent"] = time.time()
        try:
            sock.sendto("{} {} {}".format(node, os.getpid(), state["seq"]).encode(), target[4])
        except OSError:
            pass  # the network is down: the supervisor notices the silence
        state["seq"] += 1

    if sock is not None:
        send()  # the first before the agent starts: the node is alive from here on
    child = subprocess.Popen(argv)
    while child.poll() is None:
        if sock is None:
            try:
                child.wait(timeout=BEAT_EVERY_S)
            except subprocess.TimeoutExpired:
                pass
            continue
        wait = max(0.0, state["sent"] + BEAT_EVERY_S - time.time())
        if select.select([sock], [], [], min(wait, 0.2))[0]:
            try:
                sock.recv(64)
                state["answered"] = time.time()
            except OSError:
                pass
        if time.time() >= state["sent"] + BEAT_EVERY_S:
            send()
        answered = state["answered"]
        if answered is not None and not state["acted"] and \
                time.time() - answered > host_timeout:
            state["acted"] = True
            host_lost(env, node, host, time.time() - answered)
    rc = child.returncode
    return 128 - rc if rc < 0 else rc


def host_lost(env, node, host, silent):
    """End a job whose batch host is gone (see beat): requeue or cancel, one line."""
    job = env.get("SLURM_JOB_ID", "")
    action = "requeue" if env.get(HOST_LOST_ENV) == "requeue" else "cancel"
    argv = ["scontrol", "requeue", job] if action == "requeue" else ["scancel", job]
    sys.stderr.write("job {}: node {}: the batch host {} has not answered for {:.0f} s at {}: "
                     "it is lost with the job's script and rendezvous store; {} the job "
                     "({})\n".format(job, node, host, silent, time_text(time.time()),
                                     "requeueing" if action == "requeue" else "cancelling",
                                     " ".join(argv)))
    sys.stderr.flush()
    if job:
        try:
            subprocess.call(argv)
        except OSError as e:  # no Slurm commands here (e.g. inside a pyxis container)
            sys.stderr.write("job {}: node {}: {}: {}\n".format(job, node, argv[0], e))


# --- the batch host: the supervisor -------------------------------------------------------------

class Slot(object):
    """One training node's place: the node in it now and its step."""

    def __init__(self, rank, node):
        self.rank, self.node = rank, node
        self.proc = None
        self.started = 0.0
        self.rc = None  # the step's exit status once it ended


class Supervisor(object):
    def __init__(self, job, timeout, train, spares, srun, marker=None, now=time.time):
        self.job, self.timeout = job, timeout
        self.slots = [Slot(i, n) for i, n in enumerate(train)]
        self.spares = list(spares)
        self.srun = list(srun)
        self.marker = marker
        self.now = now
        self.last = {}  # node -> time of its last heartbeat
        self.lost = []  # Popen of steps on lost nodes (ended at the end, never waited for)
        self.sock = None
        self.beat_addr = ""

    def listen(self, host):
        """A UDP socket on all addresses; the steps send to HOST (the batch host's fabric
        name, the rendezvous host) at its port."""
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_DGRAM)
        self.sock.bind(("::" if family == socket.AF_INET6 else "0.0.0.0", 0))
        port = self.sock.getsockname()[1]
        self.beat_addr = "{}:{}".format("[{}]".format(host) if ":" in host else host, port)

    def start(self, slot, node):
        slot.node, slot.rc, slot.started = node, None, self.now()
        env = dict(os.environ)
        env[BEAT_ENV] = self.beat_addr
        env[NODE_RANK_ENV] = str(slot.rank)
        # torch >= 2.4 shares the rendezvous store with the workers (MASTER_ADDR/PORT): rank
        # 0 publishes that address once, in its first round, and an agent that joins a later
        # round (the spare) waits for it under the new round's prefix until read_timeout (lab
        # job 1: DistStoreError, keys /torch.rendezvous.1.1/MASTER_ADDR). Off: every round's
        # rank 0 publishes it, as torch < 2.4 always did.
        env.setdefault("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")
        argv = [self.srun[0], "--nodelist=" + node] + self.srun[1:]
        slot.proc = subprocess.Popen(argv, env=env)

    def receive(self, wait):
        ready = select.select([self.sock], [], [], wait)[0]
        while ready:
            try:
                data, addr = self.sock.recvfrom(512)
            except OSError:
                break
            node = data.decode("ascii", "replace").split(" ", 1)[0]
            self.last[node] = self.now()
            try:
                self.sock.sendto(b"ok", addr)  # the node knows its batch host lives
            except OSError:
                pass
            ready = select.select([self.sock], [], [], 0)[0]

    def beaten(self, slot):
        """Has the slot's node sent a heartbeat since its step started?"""
        return self.last.get(slot.node, -1.0) >= slot.started

    def silent_for(self, slot):
        """Seconds since the slot's node last beat, and the limit for it."""
        if not self.beaten(slot):
            return self.now() - slot.started, self.timeout + START_GRACE_S
        return self.now() - self.last[slot.node], self.timeout

    def stop_all(self, why):
        """SIGTERM to every running step (srun passes it to the tasks), then wait."""
        running = [s.proc for s in self.slots if s.proc is not None and s.proc.poll() is None]
        for proc in running:
            try:
                proc.send_signal(signal.SIGTERM)
            except OSError:
                pass
        deadline = self.now() + STOP_WAIT_S
        for proc in running:
            try:
                proc.wait(timeout=max(0.1, deadline - self.now()))
            except subprocess.TimeoutExpired:
                proc.kill()
        log("job {}: {}: the steps of the other nodes were stopped".format(self.job, why))

    def replace(self, slot, silent, why=None):
        node, now = slot.node, self.now()
        log("job {}: node {} lost at {}: {}".format(
            self.job, node, time_text(now), why or "no heartbeat for {:.0f} s".format(silent)))
        timeline_mark("node_lost", node, now)
        self.lost.append(slot.proc)
        if self.spares:
            spare = self.spares.pop(0)
            timeline_mark("spare_started", spare, self.now())
            log("job {}: spare {} takes the place of {} (node rank {}; {} spare{} left)".format(
                self.job, spare, node, slot.rank, len(self.spares),
                "" if len(self.spares) == 1 else "s"))
            self.start(slot, spare)
            return None
        if self.marker:
            with open(self.marker, "w") as f:
                f.write("node {} lost, no spare left: resumed from the last periodic "
                        "checkpoint\n".format(node))
            self.stop_all("no spare left for " + node)
            return 0
        self.stop_all("no spare left for {} (job.requeue not set: the job ends)".format(node))
        return 1

    def step(self):
        """One round: heartbeats, ended steps, silent nodes. The job's status when done."""
        self.receive(POLL_S)
        for slot in self.slots:
            if slot.rc is not None:
                continue
            rc = slot.proc.poll()
            if rc is not None and not self.beaten(slot):
                # srun ended before the node ever beat: the node is gone (srun reports a
                # node failure, even with status 0, or could not start the step there)
                verdict = self.replace(slot, self.now() - slot.started,
                                       "its step ended (status {}) before its first "
                                       "heartbeat".format(rc))
                if verdict is not None:
                    return verdict
                continue
            if rc is not None:
                slot.rc = rc
                if rc != 0:
                    log("job {}: the step on {} ended with status {}".format(
                        self.job, slot.node, rc))
                    self.stop_all("the step on {} failed".format(slot.node))
                    return rc
                continue
            silent, limit = self.silent_for(slot)
            if silent > limit:
                verdict = self.replace(slot, silent)
                if verdict is not None:
                    return verdict
        if all(slot.rc == 0 for slot in self.slots):
            return 0
        return None

    def run(self):
        for slot in self.slots:
            self.start(slot, slot.node)
        try:
            while True:
                verdict = self.step()
                if verdict is not None:
                    return verdict
        finally:
            for proc in self.lost:  # a dead node's srun waits for Slurm's SlurmdTimeout
                if proc.poll() is None:
                    proc.kill()


def nodes(text):
    return [n for n in text.split(",") if n]


def main(argv):
    if argv[:1] == ["beat"] and len(argv) > 2 and argv[1] == "--":
        return beat(argv[2:])
    if argv[:1] == ["run"] and len(argv) > 7 and argv[6] == "--":
        job, timeout, host, train, spares = argv[1], float(argv[2]), argv[3], argv[4], argv[5]
        sup = Supervisor(job, timeout, nodes(train), nodes(spares), argv[7:],
                         marker=os.environ.get("REQUEUE_MARKER") or None)
        sup.listen(host)
        return sup.run()
    sys.stderr.write("usage: run.py spares run JOB TIMEOUT HOST TRAIN SPARES -- SRUN... | "
                     "spares beat -- ARGV...\n")
    return 2
