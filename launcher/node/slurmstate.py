"""What the spares' supervisor asks Slurm, and what it makes of the answers (job.spare_nodes).

Where it sits: launcher/node/spares.py calls these on threads of its own (never on the loop
that decides, never on the heartbeats' thread: launcher/node/heartbeat.py), each command with
a timeout. The parsers and :func:`triage` are pure.

- :func:`call`: a Slurm command with a timeout; on expiry its whole process group is killed,
  and a process that still holds its pipes (another group, or stuck in the kernel on a stalled
  filesystem) is not waited for (``subprocess.run(timeout=)`` would wait for it).
- :func:`node_steps`: a node's own steps in ``squeue -s`` (to end a lost node's step).
- :func:`node_states`: ``sinfo -N`` states; :func:`triage`: which silent nodes to replace.
  Slurm pings every node over the management network: a node it says does not respond
  (``*``), down or failed is gone; one it says responds but whose heartbeat over the fabric
  stopped has lost its fabric, or the fault is the batch host's or the whole fabric's (a
  subnet manager sweep, a switch reboot). Before acting on "many nodes silent at once",
  suspect the network and the batch host first: replace nothing then, and wait.

Standard library only, Python >= 3.6.
"""

import os
import signal
import subprocess

# A node Slurm says is one of these (``sinfo -o %T``, the base state) is gone; a trailing
# ``*`` (not responding) says the same of any state.
DEAD_STATES = ("down", "fail", "powered_down", "powering_down", "power_down", "future")


def call(argv, timeout):
    """Run a Slurm command: (status, stdout), or (None, why) where it could not run or gave
    no answer within ``timeout`` s (its process group is killed then)."""
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                universal_newlines=True, start_new_session=True)
    except OSError as e:
        return None, str(e)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        try:  # a process of it in another group (or stuck in the kernel) may hold its pipes
            proc.communicate(timeout=1.0)
        except subprocess.TimeoutExpired:
            for pipe in (proc.stdout, proc.stderr):
                pipe.close()
            try:
                proc.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                pass
        return None, "no answer in {:.0f} s".format(timeout)
    if proc.returncode != 0:
        return proc.returncode, (err.strip().splitlines() or [""])[-1]
    return 0, out


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


def node_states(lines):
    """node -> state (lower case, ``*`` kept) from ``sinfo -h -N -n NODES -o "%N %T"`` lines."""
    out = {}
    for line in lines:
        parts = line.split()
        if len(parts) == 2:
            out[parts[0]] = parts[1].lower()
    return out


def is_dead(state):
    """Does Slurm say this node is gone? None (no answer) is not a yes."""
    if not state:
        return False
    base = state.rstrip("*~#!%$@^-").split("+")[0]
    return state.endswith("*") or base in DEAD_STATES


def triage(silent, states, train, spares, quiet=()):
    """Which of the ``silent`` nodes (past the heartbeat timeout) to replace now: (replace,
    why the others wait, or None).

    ``states``: Slurm's (:func:`node_states`; empty where it did not answer); ``train``: the
    training nodes, the batch host first; ``spares``: how many are left; ``quiet``: nodes
    silent for half the timeout already or since (those replaced in the same fault too),
    counted with ``silent`` as one fault.

    Nodes Slurm says are gone are replaced (more than the spares: the supervisor's requeue, as
    ever). Nodes it says respond, or all of them where it did not answer, are replaced only
    when the silence looks like theirs: not when the batch host's own heartbeat is silent
    too, not when most training nodes went silent together, and not when several went
    silent at once, more than the spares left (a leaf switch's reboot): that would burn every
    spare and then the job on a fault that may pass. One node alone is replaced, or, with no
    spare left, the job requeued as ever."""
    dead = [n for n in silent if is_dead(states.get(n))]
    live = [n for n in silent if n not in dead]
    if not live:
        return dead, None
    together = sorted(set(silent) | set(quiet))
    said = "Slurm says they respond" if states else "Slurm did not answer"
    if train and train[0] in together:
        why = ("the batch host's own heartbeat ({}) is silent too: its network, not the "
               "nodes'".format(train[0]))
    elif 2 * len(together) > len(train):
        why = ("{} of {} training nodes silent at once ({}; {}): a fabric blip or the batch "
               "host's network, not the nodes".format(len(together), len(train),
                                                      ", ".join(together), said))
    elif 1 < len(silent) > spares:
        why = ("{} nodes silent at once ({}; {}), {} spare{} left".format(
            len(silent), ", ".join(silent), said, spares, "" if spares == 1 else "s"))
    else:
        return dead + live, None
    return dead, "{}: {} not replaced, waiting".format(why, ", ".join(live))
