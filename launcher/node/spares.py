"""Spare nodes (job.spare_nodes): a lost node found by heartbeat and replaced by a spare.

Where it sits: the jobscript (torchrun mode with spares) runs ``spares run`` in the batch shell
on the batch host instead of one srun across all nodes. It starts one srun step per training
node (``--nodelist=NODE`` put after ``srun``), each task ``spares beat -- AGENT...``
(launcher/node/heartbeat.py: an authenticated UDP heartbeat to the batch host every second),
and decides here, on a loop that never waits for anything but a short poll:

- The heartbeats are received, checked and stamped on a thread of their own
  (heartbeat.Listener); Slurm's commands run on threads of their own, each with a timeout
  (launcher/node/slurmstate.py). A stalled controller or shared filesystem can delay a
  replacement, never the answers that tell the nodes their batch host lives.
- A node whose step still runs but whose heartbeat stopped for TIMEOUT s (job.heartbeat_timeout)
  is silent; Slurm is asked for the silent nodes' state first (``sinfo``), and
  slurmstate.triage decides: a node Slurm says is gone, or a few whose fabric went quiet, are
  replaced; a silence that hit the batch host's own heartbeat, most training nodes at once, or
  more nodes than spares is waited out (one line), never answered by burning the spares.
- Replacing a node ends its step through Slurm first (``scancel --signal=KILL JOB.STEP``, the
  controller reaches it over the management network): its heartbeat, its agent and its ranks
  die with it, so a node whose fabric died but which lives keeps no rank running and cannot
  end the job when it stops hearing the batch host. Should that fail, its heartbeat is
  answered "replaced" whenever it is heard again, and it ends its agent and never acts.
- One line in the job log, the spare's step started in the slot. torch's c10d rendezvous (its
  store in the agent on the batch host, node 0) drops the silent agent after its keep-alive
  (3 x 5 s); the spare's agent joins, the surviving agents restart their workers for the new
  round (a membership change: it costs none of --max_restarts) and the program resumes from
  its last checkpoint. The job runs with ``sbatch --no-kill``, so that Slurm, when it marks
  the node down, ends that node's step and not the job.

A node that hangs but lives (launch.hang_action replace: ``--hang DIR TIMEOUT PERIOD
KILL_AFTER N COLLECTOR...``): the progress deadline's watcher (launcher.node.stacks ``watch``)
runs here in a thread; after the stacks it asks the main loop (a queue: only the main loop
starts steps) to replace the nodes of the ranks behind (:func:`hang_refusal` says when not).
Their steps are ended as a lost node's, a spare's started in the slot, and the deadline starts
again from then.

Each node retired (lost, or hung and replaced) is appended to the batch script's file named in
TORCHRUN_JSC_RETIRED (launcher/node/retired.py): the script's later steps over the allocation
(the staged image's removal, the stacks of its traps) and the watcher's collector here run on
the live nodes only, as srun over a dead node of a ``--no-kill`` job fails or waits.

When no spare is left: with job.requeue ($REQUEUE_MARKER set) the marker says why, the steps
end and the jobscript's verdict requeues; without, the job ends with status 1. The batch host
itself (node 0: the batch script, this supervisor and the rendezvous store) cannot be
replaced: each node's heartbeat ends the job when it stops answering (heartbeat.host_lost).

    python3 -I KIT/node/run.py spares run JOB TIMEOUT HOST TRAIN SPARES [--hang DIR T P K N
        COLLECTOR...] -- SRUN... (batch host)
    python3 -I KIT/node/run.py spares beat -- ARGV...  (each node's task, before the agent)

TRAIN and SPARES: comma-separated node names. Exit status of ``run``: 0 when every training
step ended with 0 (or the marker was written), else the first failed step's status, 1 when a
node was lost with no spare left and no requeue. Standard library only, Python >= 3.6.
"""

import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time

from launcher.node import heartbeat, retired, slurmstate, stacks
from launcher.node.heartbeat import log
from launcher.node.stacks import time_text

NODE_RANK_ENV = "TORCHRUN_JSC_NODE_RANK"  # the slot's node rank (0: the batch host, the store)
STOP_WAIT_S = 30.0  # how long the others' steps get to end after SIGTERM
POLL_S = 0.25
END_TRIES = 3  # squeue + scancel of a lost node's step, before SIGTERM to its srun
TIMELINE_ENV = "TORCHRUN_JSC_TIMELINE"  # the job's timeline folder (launcher/node/job.sh)


def limits(timeout, ntrain):
    """What the heartbeat timeout (job.heartbeat_timeout) implies, in seconds: (a Slurm
    command's timeout, the nodes' batch host timeout, the grace for a step's first beat).

    The nodes wait for their batch host long enough that a lost node's step is ended through
    Slurm (its state asked, its step listed and cancelled: three calls) before its own
    heartbeat could give up on the batch host: 3 x TIMEOUT + 2 x the call timeout (10 s: 50 s;
    60 s: 240 s). The first heartbeat comes after srun created the step (one at a time at the
    controller) and the node's python3 started: 60 s, and a quarter second a node beyond."""
    call = min(30.0, max(2.0, float(timeout)))
    return call, 3.0 * timeout + 2.0 * call, 60.0 + 0.25 * ntrain


def background(target, *args):
    """Run ``target`` on a thread of its own (daemon): what may block stays off the loop."""
    thread = threading.Thread(target=target, args=args)
    thread.daemon = True
    thread.start()
    return thread


class Marks(object):
    """The timeline's marks, written in order by one thread of their own: the file is on
    shared storage, whose stalls must not stop the loop."""

    def __init__(self):
        self.queue = queue.Queue()
        self.thread = background(self.serve)

    def serve(self):
        while True:
            item = self.queue.get()
            if item is None:
                return
            timeline_mark(*item)

    def put(self, phase, who):
        self.queue.put((phase, who, time.time()))

    def close(self, wait_s=5.0):
        self.queue.put(None)
        self.thread.join(wait_s)


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


class Supervisor(object):
    def __init__(self, job, timeout, train, spares, srun, marker=None, now=time.monotonic,
                 hang=None, retired_file=None):
        self.job, self.timeout = job, timeout
        self.slots = [Slot(i, n) for i, n in enumerate(train)]
        self.spares = list(spares)
        self.srun = list(srun)
        self.marker = marker
        self.now = now  # monotonic: the listener stamps heartbeats on the same clock
        self.call_s, self.host_timeout, self.grace = limits(timeout, len(self.slots))
        self.lost = []  # Popen of steps on lost nodes (ended at the end, never waited for)
        # the nodes retired, in order, and the batch script's file that hears of each
        # (launcher/node/retired.py): its later steps over the allocation leave them out
        self.retired, self.retired_file = [], retired_file
        self.listener = None
        self.key = heartbeat.new_key()
        self.beat_addr = ""
        self.via = ""
        self.wake = threading.Event()  # set by a background thread that has an answer
        self.check = None  # the silent nodes' state asked of Slurm: {"nodes", "states"}
        self.next_check = 0.0
        self.held = None  # why silent nodes are waited for (said once)
        # the nodes silent (or half-way there) since every node last beat: one fault
        self.episode = set()
        self.enders = []  # threads ending lost nodes' steps
        self.marks = Marks()
        # launch.hang_action replace: (DIR, TIMEOUT, PERIOD, KILL_AFTER, COLLECTOR) of the
        # progress deadline, run here in a thread (stacks.watch); it asks the main loop
        # through ``hangs`` to replace the nodes behind (only the main loop starts steps).
        self.hang = hang
        self.hangs = queue.Queue()
        # when a node was last replaced (epoch, as the progress marks): the deadline starts there
        self.replaced_at = None
        self.watcher = None

    def listen(self, host):
        """The heartbeats' listener on all addresses; the steps send to HOST (the batch host's
        fabric name, the rendezvous host) at its port."""
        self.listener = heartbeat.Listener(self.key, len(self.slots) + len(self.spares),
                                           clock=self.now)
        self.listener.start()
        if self.listener.rcvbuf_capped:
            log("job {}: spares: the heartbeats' receive buffer is {} bytes, {} asked for {} "
                "nodes (net.core.rmem_max caps it)".format(
                    self.job, self.listener.rcvbuf_granted, self.listener.rcvbuf_asked,
                    len(self.slots) + len(self.spares)))
        self.beat_addr = "{}:{}".format("[{}]".format(host) if ":" in host else host,
                                        self.listener.port)
        # the batch host's own name: on the management network where the fabric has
        # another (JSC: jwb0001 and jwb0001i); a node whose fabric died asks by it
        own = socket.gethostname()
        if own and own != host:
            self.via = "{}:{}".format(own, self.listener.port)

    @property
    def last(self):
        return self.listener.last if self.listener is not None else {}

    def start(self, slot, node):
        slot.node, slot.rc, slot.started = node, None, self.now()
        env = dict(os.environ)
        env[heartbeat.BEAT_ENV] = self.beat_addr
        env[heartbeat.KEY_ENV] = self.key  # the environment, not argv: ps shows argv
        env[heartbeat.HOST_TIMEOUT_ENV] = "{:g}".format(self.host_timeout)
        if self.via:
            env[heartbeat.VIA_ENV] = self.via
        if self.listener is not None and self.listener.family == socket.AF_INET:
            env[heartbeat.FAMILY_ENV] = "4"
        env[NODE_RANK_ENV] = str(slot.rank)
        env.pop(retired.ENV, None)  # the batch host's file: nothing of the steps'
        # torch >= 2.4 shares the rendezvous store with the workers (MASTER_ADDR/PORT): rank
        # 0 publishes that address once, in its first round, and an agent that joins a later
        # round (the spare) waits for it under the new round's prefix until read_timeout (lab
        # job 1: DistStoreError, keys /torch.rendezvous.1.1/MASTER_ADDR). Off: every round's
        # rank 0 publishes it, as torch < 2.4 always did.
        env.setdefault("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")
        argv = [self.srun[0], "--nodelist=" + node] + self.srun[1:]
        slot.proc = subprocess.Popen(argv, env=env)

    def beaten(self, slot):
        """Has the slot's node sent a heartbeat since its step started?"""
        return self.last.get(slot.node, -1.0) >= slot.started

    def silent_for(self, slot):
        """Seconds since the slot's node last beat, and the limit for it."""
        if not self.beaten(slot):
            return self.now() - slot.started, self.timeout + self.grace
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

    def end_step(self, node, proc):
        """End a replaced node's step (a background thread): SIGKILL to every process of it
        through Slurm, by its step id (its heartbeat, agent and ranks; a rank stuck in the
        kernel too), a few tries; else SIGTERM to its srun, which passes it on."""
        why = "its step is not listed"
        for _ in range(END_TRIES):
            if proc is not None and proc.poll() is not None:
                return  # its srun ended: the step is gone
            rc, out = slurmstate.call(["squeue", "-h", "-s", "-j", str(self.job), "-o",
                                       "%i %N"], self.call_s)
            if rc != 0:
                why = "squeue: {}".format(out)
                continue
            ids = slurmstate.node_steps(self.job, node, out.splitlines())
            if not ids:
                break
            rc, out = slurmstate.call(["scancel", "--signal=KILL"] + ids, self.call_s)
            if rc == 0:
                log("job {}: the step of {} was ended through Slurm (scancel --signal=KILL "
                    "{})".format(self.job, node, " ".join(ids)))
                return
            why = "scancel: {}".format(out)
        log("job {}: the step of {} could not be ended through Slurm ({}): SIGTERM to its "
            "srun".format(self.job, node, why))
        try:
            proc.send_signal(signal.SIGTERM)  # srun passes it on to the step's tasks
        except (OSError, AttributeError):
            pass

    def retire(self, slot):
        """The slot's node leaves the job: answered "replaced", its step ended."""
        if self.listener is not None:
            self.listener.replaced.add(slot.node)
        self.lost.append(slot.proc)
        self.retired.append(slot.node)
        retired.record(self.retired_file, slot.node)  # a local file: one write, no wait
        self.enders.append(background(self.end_step, slot.node, slot.proc))

    def replace(self, slot, silent, why=None):
        node = slot.node
        log("job {}: node {} lost at {}: {}".format(
            self.job, node, time_text(time.time()),
            why or "no heartbeat for {:.0f} s".format(silent)))
        self.marks.put("node_lost", node)
        self.retire(slot)
        if self.spares:
            spare = self.spares.pop(0)
            self.marks.put("spare_started", spare)
            log("job {}: spare {} takes the place of {} (node rank {}; {})".format(
                self.job, spare, node, slot.rank, self.spares_left()))
            self.start(slot, spare)
            self.replaced_at = time.time()
            return None
        if self.marker:
            with open(self.marker, "w") as f:
                f.write("node {} lost, no spare left: resumed from the last periodic "
                        "checkpoint\n".format(node))
            self.stop_all("no spare left for " + node)
            return 0
        self.stop_all("no spare left for {} (job.requeue not set: the job ends)".format(node))
        return 1

    # --- silent nodes: ask Slurm, then triage ---------------------------------------------

    def ask(self, nodes):
        """Ask Slurm for the nodes' state on a thread of its own; the loop looks again later."""
        check = {"nodes": list(nodes), "states": None}

        def run():
            rc, out = slurmstate.call(["sinfo", "-h", "-N", "-n", ",".join(nodes), "-o",
                                       "%N %T"], self.call_s)
            check["states"] = slurmstate.node_states(out.splitlines()) if rc == 0 else {}
            self.wake.set()

        self.check = check
        background(run)

    def look(self, silent):
        """The silent slots of this round: replace those triage says; None, or the job's
        status when a replacement ended it."""
        nodes = [s.node for s in silent]
        check = self.check
        if check is None or (check["states"] is not None and not set(nodes) <= set(
                check["nodes"])):
            if self.now() >= self.next_check:
                self.ask(nodes)
            return None
        if check["states"] is None:
            return None  # Slurm has not answered yet
        replace, why = slurmstate.triage(nodes, check["states"], [s.node for s in self.slots],
                                         len(self.spares), sorted(self.episode - set(nodes)))
        self.check = None
        if why is not None:
            if why != self.held:
                log("job {}: {}".format(self.job, why))
            self.held, self.next_check = why, self.now() + self.timeout
        for slot in silent:
            if slot.node in replace:
                verdict = self.replace(slot, self.silent_for(slot)[0])
                if verdict is not None:
                    return verdict
        return None

    # --- launch.hang_action replace ---------------------------------------------------------

    def on_hang(self, nodes, idle, text):
        """The watcher's question (its thread): replace ``nodes``? None when done, else why
        not. Answered by the main loop (:meth:`step`), which alone starts and ends steps."""
        answer = queue.Queue(1)
        self.hangs.put((nodes, idle, answer))
        self.wake.set()
        return answer.get()

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
                    self.job, node, time_text(time.time()), idle, spare, slot.rank,
                    self.spares_left()))
            # on the job's timeline as a recovery like a lost node's (its round, the spare)
            self.marks.put("node_lost", node)
            self.retire(slot)
            self.marks.put("spare_started", spare)
            self.start(slot, spare)
        self.replaced_at = time.time()
        return None

    def collector(self):
        """The watcher's stacks collector now (its thread): over the allocation's nodes but
        those retired, whose srun would fail on a dead node or wait for it."""
        argv, lost = self.hang[4], list(self.retired)
        if lost:
            log(retired.note(self.job, "stacks", retired.nodes_of(argv) or 0, lost))
        return retired.live_argv(argv, lost)

    def start_watcher(self):
        directory, timeout, period, kill_after, _ = self.hang
        self.watcher = threading.Thread(
            target=stacks.watch, name="jsc_hang_watch",
            args=(self.job, directory, timeout, period, kill_after, self.collector),
            kwargs={"on_hang": self.on_hang, "since": lambda: self.replaced_at})
        self.watcher.daemon = True
        self.watcher.start()

    def step(self):
        """One round: the watcher's questions, ended steps, silent nodes. The job's status
        when done."""
        self.wake.wait(POLL_S)
        self.wake.clear()
        while not self.hangs.empty():
            nodes, idle, answer = self.hangs.get()
            answer.put(self.hung(nodes, idle))
        silent, quiet = [], []
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
            elapsed, limit = self.silent_for(slot)
            if elapsed > limit:
                silent.append(slot)
            elif self.beaten(slot) and elapsed > self.timeout / 2.0:
                quiet.append(slot.node)
        self.episode |= set(s.node for s in silent) | set(quiet)
        if silent:
            verdict = self.look(silent)
            if verdict is not None:
                return verdict
        elif not quiet:
            if self.held is not None:
                log("job {}: every training node beats again: nothing was replaced".format(
                    self.job))
            self.held, self.check, self.next_check = None, None, 0.0
            self.episode = set()
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
            for thread in self.enders:  # a lost node's step ended before the job's end
                thread.join(END_TRIES * 2 * self.call_s + 1)
            for proc in self.lost:  # a dead node's srun waits for Slurm's SlurmdTimeout
                if proc is not None and proc.poll() is None:
                    proc.kill()
            if self.watcher is not None and self.watcher.is_alive() and \
                    os.path.exists(os.path.join(self.hang[0], stacks.VERDICT)):
                # it ended the job: its SIGKILL to the steps still left comes KILL_AFTER s
                # after its SIGTERM (the jobscript prints its line once this returns)
                self.watcher.join(self.hang[3] + 60)
            if self.listener is not None:
                self.listener.stop()
            self.marks.close()


def nodes(text):
    return [n for n in text.split(",") if n]


def main(argv):
    if argv[:1] == ["beat"] and len(argv) > 2 and argv[1] == "--":
        return heartbeat.beat(argv[2:])
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
                         marker=os.environ.get("REQUEUE_MARKER") or None, hang=hang,
                         retired_file=os.environ.get(retired.ENV) or None)
        sup.listen(host)
        return sup.run()
    sys.stderr.write("usage: run.py spares run JOB TIMEOUT HOST TRAIN SPARES [--hang DIR "
                     "TIMEOUT_S PERIOD_S KILL_AFTER_S N COLLECTOR(N words)] -- SRUN... | "
                     "spares beat -- ARGV...\n")
    return 2
