"""The nodes that the spares' supervisor retired (lost, or hung and replaced): how the batch
script's later steps learn which nodes of the allocation still live.

Where it sits: launcher/node/job.sh ``jsc_spare_nodes`` makes the file and names it to the
supervisor (launcher/node/spares.py) in TORCHRUN_JSC_RETIRED; the supervisor appends each node
it retires (:func:`record`); job.sh ``jsc_live`` reads it for every later step that spans the
allocation (the staged image's removal, the stacks collector of the SIGURG/SIGTERM traps) and
its EXIT trap removes it. The supervisor's own stacks collector (the progress deadline's
watcher, a thread of it) leaves the same nodes out by :func:`live_argv`.

Why these steps must leave them out: the job runs with ``sbatch --no-kill``, so a lost node
stays in the allocation, and ``srun --nodes=N`` over all N nodes fails on it ("Required node
not available (down)") or waits until Slurm declares it down: the staged copies would stay in
every node's /tmp and the stacks collector would print nothing or wait for its timeout.

Why a file, and this one: the supervisor runs in a background subshell of the batch script
(``jsc_spares_launch ... &``), so no shell variable can carry the answer back, and the traps
that collect stacks run while it still works: they need to read what it knows so far, at any
moment. A file on the batch host (both ends run there) does: made by ``mktemp`` (mode 0600,
a name per job that nobody can know before: never another user's file on a shared /tmp), under
$TMPDIR or /tmp, on the node and not on shared storage (no GPFS stall on the supervisor's
loop, and nothing per job left in the submit directory), and removed by the batch script's
EXIT trap, which runs after a failed launch too. One node per line, each appended by one
write(2) on an O_APPEND descriptor: the kernel puts each such write at the end whole, so lines
of several writers never interleave, and a reader takes whole lines only (one being written
counts once it is complete).

Standard library only, Python >= 3.6.
"""

import os

ENV = "TORCHRUN_JSC_RETIRED"  # the file's path, for the supervisor only (not its steps)


def record(path, node):
    """Append NODE as one line in one write; True when written. Never creates the file (a
    path from the environment that job.sh did not make stays absent) and never raises: a
    missing record makes later steps wait on the node, it must not end the job."""
    if not path:
        return False
    data = (node + "\n").encode("utf-8")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    except OSError:
        return False
    try:
        return os.write(fd, data) == len(data)
    except OSError:
        return False
    finally:
        os.close(fd)


def read(path):
    """The retired nodes in the order written, each once: whole lines only (the last one,
    without its newline yet, is still being written)."""
    try:
        with open(path, "rb") as f:
            text = f.read().decode("utf-8", "replace")
    except (OSError, TypeError):
        return []
    out = []
    for line in text.split("\n")[:-1]:
        if line and line not in out:
            out.append(line)
    return out


def live_argv(argv, lost):
    """A step over the whole allocation (``--nodes=N --ntasks=N``, one task per node) on its
    live nodes only: ``--exclude=LOST`` (srun takes it inside an allocation) before
    ``--nodes=``, and N less the nodes left out. ``lost``: nodes of the allocation. With none
    lost, a copy of ``argv`` as it is."""
    lost = [n for i, n in enumerate(lost) if n and n not in lost[:i]]
    if not lost:
        return list(argv)
    out = []
    for token in argv:
        for name in ("--nodes=", "--ntasks="):
            if token.startswith(name) and token[len(name):].isdigit():
                if name == "--nodes=":
                    out.append("--exclude=" + ",".join(lost))
                token = name + str(int(token[len(name):]) - len(lost))
        out.append(token)
    return out


def nodes_of(argv):
    """The ``--nodes=N`` of a step's argv, or None."""
    for token in argv:
        if token.startswith("--nodes=") and token[len("--nodes="):].isdigit():
            return int(token[len("--nodes="):])
    return None


def note(job, what, total, lost):
    """One line for the job's log when nodes were left out: "job 7: unstaging on 2 of 3
    nodes (jwb0002 lost)"."""
    return "job {}: {} on {} of {} nodes ({} lost)".format(
        job, what, total - len(lost), total, " ".join(lost))
