"""Spare nodes' heartbeat (job.spare_nodes): the datagrams, the batch host's listener and each
node's sender.

Where it sits: launcher/node/spares.py (the supervisor in the batch shell) opens a
:class:`Listener` and starts one srun step per training node; each step's task is
``spares beat -- AGENT...`` (:func:`beat`), which sends this node's heartbeat to the batch host
once a second and runs the agent as its child. The listener answers each heartbeat, so that a
node knows its batch host lives (:func:`host_lost` when it stops answering).

- Authenticated: the supervisor draws a secret per job (:func:`new_key`) and hands it to the
  steps in the environment ($TORCHRUN_JSC_BEAT_KEY, never argv: argv is world-readable in
  ps); every datagram carries an HMAC-SHA256 of its words with it, and a sequence number that
  only grows (a replayed datagram is old). Anything else on the fabric is ignored, so no
  process can keep a dead node "alive" or tell a node its batch host answers. The agent and
  the program do not inherit the secret.
- Received on a thread that does nothing else (:class:`Listener`): a heartbeat is stamped
  (time.monotonic) as it arrives, whatever the supervisor's main loop waits for (Slurm,
  shared storage); the receive buffer is sized for the node count (:func:`rcvbuf_for`).
- Both address families: the listener binds ``::`` with IPV6_V6ONLY off (IPv4 arrives as
  ::ffff:a.b.c.d), so a name that resolves AAAA first reaches it; where the host has no IPv6
  it binds 0.0.0.0 and tells the nodes ($TORCHRUN_JSC_BEAT_FAMILY=4) to resolve IPv4 only.
- Two networks, as sites have: the heartbeat goes to the rendezvous host's name (the fabric,
  what the training uses). A node that hears no answer for PROBE_AFTER_S also sends a probe
  to the batch host's own name ($TORCHRUN_JSC_BEAT_VIA, the management network where the
  hostname is there). A probe is answered but keeps no node alive: a node whose fabric died
  is still replaced, yet it learns that its batch host lives, so it never ends the job for
  its own fabric's fault. Only when neither network answers is the batch host lost.
- A replaced node is answered "replaced" (by either network): it ends its agent and never acts
  on its batch host's silence (its step is ended through Slurm too: launcher/node/spares.py).

Standard library only, Python >= 3.6.
"""

import hashlib
import hmac
import os
import secrets
import select
import signal
import socket
import subprocess
import sys
import threading
import time

from launcher.node.stacks import time_text

BEAT_ENV = "TORCHRUN_JSC_BEAT"  # HOST:PORT the heartbeats go to, set for the steps by ``run``
KEY_ENV = "TORCHRUN_JSC_BEAT_KEY"  # the job's secret (hex): environment only, never argv
FAMILY_ENV = "TORCHRUN_JSC_BEAT_FAMILY"  # "4": the listener has IPv4 only
VIA_ENV = "TORCHRUN_JSC_BEAT_VIA"  # HOST:PORT of the listener by the batch host's own name
HOST_TIMEOUT_ENV = "TORCHRUN_JSC_HOST_TIMEOUT"  # seconds (launcher/node/spares.py derives it)
HOST_LOST_ENV = "TORCHRUN_JSC_HOST_LOST"  # requeue | cancel: what a node does then
BEAT_EVERY_S = 1.0
PROBE_AFTER_S = 3.0  # no answer over the fabric this long: ask by the other network too
HOST_CALL_TIMEOUT_S = 60.0  # scontrol requeue / scancel of a node whose batch host is lost
# Linux charges each queued datagram its buffer's true size (835 bytes for a heartbeat on
# loopback here, more behind a NIC's driver) against SO_RCVBUF, which it doubles: 64 KiB + 2 KiB
# a node holds a few seconds of every node's heartbeats should the listener ever fall behind.
RCVBUF_BASE = 65536
RCVBUF_PER_NODE = 2048


_LOG_LOCK = threading.Lock()


def log(line):
    """One line on stdout (the job's log), whole even when the supervisor's threads write."""
    with _LOG_LOCK:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


# --- the datagrams ----------------------------------------------------------------------------

def new_key():
    return secrets.token_hex(16)


def _mac(key, text):
    return hmac.new(key.encode(), text.encode(), hashlib.sha256).hexdigest()[:32]


def pack(key, kind, node, seq):
    """``KIND NODE SEQ MAC``: kind beat (node -> batch host), ok or replaced (the answer)."""
    text = "{} {} {}".format(kind, node, seq)
    return "{} {}".format(text, _mac(key, text)).encode()


def unpack(key, data):
    """(kind, node, seq) of a datagram with a valid MAC, else None."""
    try:
        words = data.decode("ascii").split(" ")
    except UnicodeDecodeError:
        return None
    if len(words) != 4 or not words[2].isdigit():
        return None
    if not hmac.compare_digest(words[3], _mac(key, " ".join(words[:3]))):
        return None
    return words[0], words[1], int(words[2])


# --- the batch host: the listener -----------------------------------------------------------

def rcvbuf_for(nodes):
    return RCVBUF_BASE + RCVBUF_PER_NODE * nodes


def open_socket():
    """A UDP socket on every address: dual-stack where the host has IPv6. (socket, family)."""
    if socket.has_ipv6:
        try:
            sock = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            sock.bind(("::", 0))
            return sock, socket.AF_INET6
        except OSError:
            pass
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("0.0.0.0", 0))
    return sock, socket.AF_INET


class Listener(object):
    """Receives, checks, stamps and answers heartbeats on a thread of its own, nothing else.

    ``last``: node -> time.monotonic() of its last valid heartbeat, written here alone and
    read by the supervisor (single dict operations: atomic in CPython). ``replaced``: nodes
    the supervisor replaced, answered "replaced". ``rejected``: datagrams ignored."""

    def __init__(self, key, nodes, clock=time.monotonic):
        self.key, self.clock = key, clock
        self.last, self.seq = {}, {}
        self.replaced = set()
        self.rejected = 0
        self.sock, self.family = open_socket()
        self.rcvbuf_asked = rcvbuf_for(nodes)
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.rcvbuf_asked)
        except OSError:
            pass
        # Linux reports twice what it granted (the other half is its bookkeeping)
        self.rcvbuf = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
        self.rcvbuf_granted = self.rcvbuf // 2 if sys.platform.startswith("linux") else \
            self.rcvbuf
        self.rcvbuf_capped = self.rcvbuf_granted < self.rcvbuf_asked
        self.port = self.sock.getsockname()[1]
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self.serve, name="jsc_heartbeats")
        self.thread.daemon = True

    def start(self):
        self.sock.settimeout(0.5)  # the thread looks at ``stopped`` this often when idle
        self.thread.start()

    def stop(self):
        self.stopped.set()

    def serve(self):
        while not self.stopped.is_set():
            try:
                data, addr = self.sock.recvfrom(512)
            except OSError:  # socket.timeout included
                continue
            self.take(data, addr, self.clock())

    def take(self, data, addr, now):
        got = unpack(self.key, data)
        if got is None or got[0] not in ("beat", "probe") or got[2] <= self.seq.get(got[1], -1):
            self.rejected += 1  # no MAC, not a heartbeat, or a replay
            return
        node, seq = got[1], got[2]
        self.seq[node] = seq
        if got[0] == "beat":  # a probe came by the other network: the fabric may be dead
            self.last[node] = now
        kind = "replaced" if node in self.replaced else "ok"
        try:
            self.sock.sendto(pack(self.key, kind, node, seq), addr)
        except OSError:
            pass  # its network is down: the node notices the silence


# --- each node: the heartbeat ---------------------------------------------------------------

def _ignore(signum, frame):
    """Signals for the step reach every process of it (slurmstepd's proctrack): the agent gets
    them itself. The heartbeat must not die of one (SIGUSR2 of job.requeue, SIGTERM while the
    agent stops its workers): it ends when the agent ends. A handler, not SIG_IGN: a handler
    is reset at exec, so the agent gets the default dispositions."""


def resolve(host, port, family_hint):
    """The heartbeat's destination (getaddrinfo's first answer), IPv4 only where the
    listener is; None and one line where the name does not resolve."""
    family = socket.AF_INET if family_hint == "4" else socket.AF_UNSPEC
    try:
        return socket.getaddrinfo(host.strip("[]"), int(port), family, socket.SOCK_DGRAM)[0]
    except OSError as e:
        sys.stderr.write("spares beat: cannot resolve {} ({}): no heartbeat\n".format(host, e))
        return None


def beat(argv, env=None, host_timeout=None):
    """Run ARGV as a child; send this node's heartbeat to $TORCHRUN_JSC_BEAT every second
    while it runs; return its exit status (128 + N for a signal N).

    The supervisor answers every heartbeat. Once it answered and then stayed silent for the
    host timeout ($TORCHRUN_JSC_HOST_TIMEOUT), the batch host is lost: Slurm keeps a --no-kill
    job whose batch host died RUNNING without its batch script until the time limit (lab,
    Slurm 24.11), so this node ends it (:func:`host_lost`). An answer "replaced" means the
    supervisor gave this node's place to a spare: the agent is killed and the batch host's
    silence never acted on."""
    env = os.environ if env is None else env
    if host_timeout is None:
        host_timeout = float(env.get(HOST_TIMEOUT_ENV) or 50.0)
    host, _, port = env.get(BEAT_ENV, "").rpartition(":")
    node = env.get("SLURMD_NODENAME") or socket.gethostname()
    key = env.get(KEY_ENV)
    for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2,
                signal.SIGALRM, signal.SIGURG):
        signal.signal(sig, _ignore)
    target = via = None
    if not key:
        sys.stderr.write("spares beat: ${} is not set: no heartbeat from {}\n".format(
            KEY_ENV, node))
    elif host and port.isdigit():
        target = resolve(host, port, env.get(FAMILY_ENV))
        via_host, _, via_port = env.get(VIA_ENV, "").rpartition(":")
        if target and via_host and via_port.isdigit():
            via = resolve(via_host, via_port, env.get(FAMILY_ENV))
    sock = socket.socket(target[0], socket.SOCK_DGRAM) if target else None
    probe = socket.socket(via[0], socket.SOCK_DGRAM) if via else None
    child_env = dict(env)
    child_env.pop(KEY_ENV, None)  # the agent and the program have no use for the secret
    # the sequence only grows, also across a restarted heartbeat on this node
    state = {"seq": int(time.time() * 1000), "sent": 0.0, "answered": None, "seen": -1,
             "acted": False, "replaced": False}

    def send():
        state["sent"] = time.monotonic()
        answered = state["answered"]
        if probe is not None and answered is not None and \
                state["sent"] - answered > PROBE_AFTER_S:
            try:
                probe.sendto(pack(key, "probe", node, state["seq"]), via[4])
            except OSError:
                pass
            state["seq"] += 1
        try:
            sock.sendto(pack(key, "beat", node, state["seq"]), target[4])
        except OSError:
            pass  # the network is down: the supervisor notices the silence
        state["seq"] += 1

    if sock is not None:
        send()  # the first before the agent starts: the node is alive from here on
    child = subprocess.Popen(argv, env=child_env)
    while child.poll() is None:
        if sock is None:
            try:
                child.wait(timeout=BEAT_EVERY_S)
            except subprocess.TimeoutExpired:
                pass
            continue
        wait = max(0.0, state["sent"] + BEAT_EVERY_S - time.monotonic())
        for ready in select.select([s for s in (sock, probe) if s], [], [], min(wait, 0.2))[0]:
            answer(ready, key, node, state, child)
        if time.monotonic() >= state["sent"] + BEAT_EVERY_S:
            send()
        answered = state["answered"]
        if answered is not None and not state["acted"] and not state["replaced"] and \
                time.monotonic() - answered > host_timeout:
            state["acted"] = True
            host_lost(env, node, host, time.monotonic() - answered)
    rc = child.returncode
    return 128 - rc if rc < 0 else rc


def answer(sock, key, node, state, child):
    """Read one answer: "ok" (the batch host lives) or "replaced" (end the agent)."""
    try:
        got = unpack(key, sock.recv(512))
    except OSError:
        return
    if got is None or got[1] != node or got[2] <= state["seen"]:
        return  # not for us, forged or a replay
    state["seen"], state["answered"] = got[2], time.monotonic()
    if got[0] == "replaced" and not state["replaced"]:
        state["replaced"] = True
        sys.stderr.write("spares beat: {} was replaced by a spare at {}: its agent is ended "
                         "here\n".format(node, time_text(time.time())))
        sys.stderr.flush()
        try:
            child.kill()
        except OSError:
            pass


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
            subprocess.call(argv, timeout=HOST_CALL_TIMEOUT_S)
        except (OSError, subprocess.SubprocessError) as e:
            # no Slurm commands here (e.g. inside a pyxis container), or no answer
            sys.stderr.write("job {}: node {}: {}: {}\n".format(job, node, argv[0], e))
