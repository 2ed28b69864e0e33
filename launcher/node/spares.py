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

A node that hangs but lives (launch.hang_action replace: ``--hang DIR TIMEOUT PERIOD
KILL_AFTER N COLLECTOR...``): the progress deadline's watcher (launcher.node.stacks ``watch``,
the loop the jobscript runs without spares) runs here in a thread; after the stacks it asks
the main loop (a queue: only the main loop starts and ends steps) to replace the nodes of the
ranks behind (:func:`hang_refusal` says when not: none behind, the batch host, too few
spares; the job then ends as without replace). The hung node's step is ended by Slurm
(``scancel --signal=KILL`` of its step), a spare's started in its slot, and the deadline starts
again from then, as after a node lost by heartbeat.

When no spare is left: with job.requeue ($REQUEUE_MARKER set) the marker says why, the steps
end and the jobscript's verdict requeues (the program resumes from its last periodic
checkpoint); without, the job ends with status 1. The batch host itself (node 0: the batch
script, this supervisor and the rendezvous store) cannot be replaced: Slurm ends the job with
it, and requeues it where job.requeue is set.

    python3 -I KIT/node/run.py spares run JOB TIMEOUT HOST TRAIN SPARES [--hang DIR T P K N
        COLLECTOR...] -- SRUN... (batch host)
    python3 -I KIT/node/run.py spares beat -- ARGV...  (each node's task, before the agent)

TRAIN and SPARES: comma-separated node names. Exit status of ``run``: 0 when every training
step ended with 0 (or the marker was written), else the first failed step's status, 1 when a
node was lost with no spare left and no requeue. Standard library only, Python >= 3.6.
"""

import os
import queue
import select
import signal
import socket
import subprocess
import sys
import threading
import time

from launcher.node import stacks
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


def hang_refusal(nodes, train, spares):
    """Why the nodes the progress deadline names as behind cannot be replaced, in a few words;
    None when they can (launch.hang_action replace). ``train``: the training nodes now, node
    rank 0 (the batch host) first; ``spares``: how many are left."""
    if not nodes:
        return ("the deadline names no node behind the others (every running rank issued as "
                "many collectives: they wait in one together)")
    if train and train[0] in nodes:
        return ("node {} is behind, and it is the batch host (the job's script and "
                "rendezvous store): it cannot be replaced".format(train[0]))
    gone = [n for n in nodes if n not in train]
    if gone:
        return "node {} is behind but trains no more".format(", ".join(gone))
    if len(nodes) > spares:
        return "{} behind ({}), {} left".format(
            "{} nodes are".format(len(nodes)) if len(nodes) != 1 else "1 node is",
            ", ".join(nodes), "{} spare{}".format(spares, "" if spares == 1 else "s"))
    return None


def node_steps(job, node, lines):
    """The ids of the job's steps that run on ``node`` alone, from ``squeue -h -s -j JOB -o
    "%i %N"`` lines (the per-node steps; not the batch or extern step, nor a step across
    several nodes such as the stack collector's)."""
    prefix = "{}.".format(job)
    out = []
    for line in lines:
        parts = line.split()
        if len(parts) == 2 and parts[1] == node and parts[0].startswith(prefix) \
                and parts[0][len(prefix):].isdigit():
            out.append(parts[0])
    return out


class Supervisor(object):
    def __init__(self, job, timeout, train, spares, srun, marker=None, now=time.time,
                 hang=None):
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
        # launch.hang_action replace: (DIR, TIMEOUT, PERIOD, KILL_AFTER, COLLECTOR) of the
        # progress deadline, run here in a thread (stacks.watch); it asks the main loop
        # through ``hangs`` to replace the nodes behind (only the main loop starts steps).
        self.hang = hang
        self.hangs = queue.Queue()
        self.replaced_at = None  # when a node was last replaced: the deadline starts there
        self.watcher = None

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

    def spares_left(self):
        return "{} spare{} left".format(len(self.spares), "" if len(self.spares) == 1 else "s")

    def replace(self, slot, silent, why=None):
        node, now = slot.node, self.now()
        log("job {}: node {} lost at {}: {}".format(
            self.job, node, time_text(now), why or "no heartbeat for {:.0f} s".format(silent)))
        timeline_mark("node_lost", node, now)
        self.lost.append(slot.proc)
        if self.spares:
            spare = self.spares.pop(0)
            timeline_mark("spare_started", spare, self.now())
            log("job {}: spare {} takes the place of {} (node rank {}; {})".format(
                self.job, spare, node, slot.rank, self.spares_left()))
            self.start(slot, spare)
            self.replaced_at = self.now()
            return None
        if self.marker:
            with open(self.marker, "w") as f:
                f.write("node {} lost, no spare left: resumed from the last periodic "
                        "checkpoint\n".format(node))
            self.stop_all("no spare left for " + node)
            return 0
        self.stop_all("no spare left for {} (job.requeue not set: the job ends)".format(node))
        return 1

    # --- launch.hang_action replace ---------------------------------------------------------

    def on_hang(self, nodes, idle, text):
        """The watcher's question (its thread): replace ``nodes``? None when done, else why
        not. Answered by the main loop (:meth:`step`), which alone starts and ends steps."""
        answer = queue.Queue(1)
        self.hangs.put((nodes, idle, answer))
        return answer.get()

    def end_step(self, slot):
        """End the hung node's step now (SIGKILL to every process of it, through Slurm: a
        rank stopped or stuck in the kernel goes too), so that its agent leaves the
        rendezvous and its ranks their collectives; by its step id, else through its srun."""
        try:
            listed = subprocess.run(["squeue", "-h", "-s", "-j", str(self.job), "-o", "%i %N"],
                                    stdout=subprocess.PIPE, universal_newlines=True,
                                    timeout=60).stdout.splitlines()
        except (OSError, subprocess.SubprocessError) as exc:
            sys.stderr.write("spares: squeue: {}\n".format(exc))
            listed = []
        ids = node_steps(self.job, slot.node, listed)
        if ids:
            try:
                subprocess.call(["scancel", "--signal=KILL"] + ids)
                return
            except OSError as exc:
                sys.stderr.write("spares: scancel: {}\n".format(exc))
        try:
            slot.proc.send_signal(signal.SIGTERM)  # srun passes it on to the step's tasks
        except OSError:
            pass

    def hung(self, nodes, idle):
        """Replace the hung ``nodes`` by spares (their stacks are written): None, or why not."""
        why = hang_refusal(nodes, [s.node for s in self.slots], len(self.spares))
        if why is not None:
            return why
        for node in nodes:
            slot = next(s for s in self.slots if s.node == node)
            spare = self.spares.pop(0)
            log("job {}: node {} hung at {} (no progress for {:.0f} s, its stacks above): "
                "replaced by spare {} (node rank {}; {})".format(
                    self.job, node, time_text(self.now()), idle, spare, slot.rank,
                    self.spares_left()))
            # on the job's timeline as a recovery like a lost node's (its round, the spare)
            timeline_mark("node_lost", node, self.now())
            self.end_step(slot)
            self.lost.append(slot.proc)
            timeline_mark("spare_started", spare, self.now())
            self.start(slot, spare)
        self.replaced_at = self.now()
        return None

    def start_watcher(self):
        directory, timeout, period, kill_after, collector = self.hang
        self.watcher = threading.Thread(
            target=stacks.watch, name="jsc_hang_watch",
            args=(self.job, directory, timeout, period, kill_after, collector),
            kwargs={"on_hang": self.on_hang, "since": lambda: self.replaced_at})
        self.watcher.daemon = True
        self.watcher.start()

    def step(self):
        """One round: heartbeats, the watcher's questions, ended steps, silent nodes. The
        job's status when done."""
        self.receive(POLL_S)
        while not self.hangs.empty():
            nodes, idle, answer = self.hangs.get()
            answer.put(self.hung(nodes, idle))
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
        if self.hang is not None:
            self.start_watcher()
        try:
            while True:
                verdict = self.step()
                if verdict is not None:
                    return verdict
        finally:
            for proc in self.lost:  # a dead node's srun waits for Slurm's SlurmdTimeout
                if proc.poll() is None:
                    proc.kill()
            if self.watcher is not None and self.watcher.is_alive() and \
                    os.path.exists(os.path.join(self.hang[0], stacks.VERDICT)):
                # it ended the job: its SIGKILL to the steps still left comes KILL_AFTER s
                # after its SIGTERM (the jobscript prints its line once this returns)
                self.watcher.join(self.hang[3] + 60)


def nodes(text):
    return [n for n in text.split(",") if n]


def main(argv):
    if argv[:1] == ["beat"] and len(argv) > 2 and argv[1] == "--":
        return beat(argv[2:])
    hang, rest = None, argv[6:]
    if rest[:1] == ["--hang"] and len(rest) > 5 and rest[5].isdigit():
        count = int(rest[5])
        directory, timeout_s, period, kill_after = rest[1], rest[2], rest[3], rest[4]
        hang = (directory, float(timeout_s), float(period), float(kill_after),
                rest[6:6 + count])
        rest = rest[6 + count:]
    if argv[:1] == ["run"] and len(argv) > 6 and len(rest) > 1 and rest[0] == "--":
        job, timeout, host, train, spares = argv[1], float(argv[2]), argv[3], argv[4], argv[5]
        sup = Supervisor(job, timeout, nodes(train), nodes(spares), rest[1:],
                         marker=os.environ.get("REQUEUE_MARKER") or None, hang=hang)
        sup.listen(host)
        return sup.run()
    sys.stderr.write("usage: run.py spares run JOB TIMEOUT HOST TRAIN SPARES [--hang DIR "
                     "TIMEOUT_S PERIOD_S KILL_AFTER_S N COLLECTOR(N words)] -- SRUN... | "
                     "spares beat -- ARGV...\n")
    return 2
