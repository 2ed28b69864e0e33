"""The stack hook: ``sitecustomize.py`` first on the workers' PYTHONPATH (docs/guide/hangs.md).

Where it sits: spec -> jobscript (every task starts through the kit's launcher/task/hook.sh,
which puts this file's directory, in the kit bound into the container, first on PYTHONPATH
there) -> every Python process of the job imports it at
start-up -> ``launcher.node.stacks`` (``jsc-compose stacks JOBID``, or the jobscript before the job
is killed) signals the ranks and reads what they wrote.

Standard library only, Python >= 3.6, no output (but the requeue hold's one line), never
raises. It arms only a process that
runs the user's program as a rank: one with a rank variable of the mode (the jobscript names
them in TORCHRUN_JSC_STACKS_RANK_VARS; RANK where unset: torchrun's, accelerate's and
deepspeed's workers, srun mode's tasks), and only the first Python process of that rank
(children inherit TORCHRUN_JSC_STACKS_PID and stay unarmed: DataLoader workers,
subprocesses; forked children are disarmed at fork). MPI rank variables (PMIX_RANK with
srun --mpi=pmix, PMI_RANK under psslurm, OMPI_COMM_WORLD_RANK under mpirun) count only in a
mode whose ranks MPI starts (horovod): elsewhere the per-node agent carries them too, and an
armed agent would leave its workers unarmed (issue 26). Arming costs one open file; nothing
runs until SIGURG comes, whose default action is to be ignored, so the same signal reaching an
unarmed process does nothing. Then faulthandler (C code, no GIL needed: also while the rank
waits in NCCL or gloo) appends every thread's Python stack to the rank's dump file, which lives
in the node's memory, not on shared storage (an anonymous memfd named jsc-stacks.HOST.PID, read
by the collector on the node through /proc/PID/fd; issue 36). Any other sitecustomize on the
path after this one still runs.

Requeue (only where REQUEUE_SIGNAL is set: the spec sets job.requeue): the rank holds that
signal blocked until the program installs a handler for it, then hands it over
(torchrun_jsc_kit/stop.py): a rank still importing torch does not die of it, and the program's
own handler (Lightning's, submitit's, a plain signal.signal) gets it.

Progress (only where the directory ``STACKS_DIR/progress`` exists: the spec sets
launch.hang_timeout): one daemon thread wakes every ``progress/period`` seconds and reads how
many collectives this rank has issued (torch's per-group sequence numbers, summed over every
process group, once torch.distributed is imported: nothing is patched or wrapped) and how often
the program called ``torchrun_jsc_kit.progress()``; when either moved it rewrites its one-line
mark in place, at its slot (its local rank) of its node's file ``progress/marks.NODE`` (one file
per node). At exit the mark says done. The watcher in the batch shell (launcher.node.stacks
``watch``) reads the marks. Nothing runs per step.

Timeline (only where TORCHRUN_JSC_TIMELINE is set: every kit jobscript sets it): ``phase``
appends one line per mark to the node's file of the job's start-up timeline; a rank marks its
start, and a thread marks when its process group is up and its first collective issued
(docs/guide/timeline.md).
"""

import os
import sys

DIR_ENV = "TORCHRUN_JSC_STACKS"  # the directory the dumps go to (set by the jobscript)
PID_ENV = "TORCHRUN_JSC_STACKS_PID"  # the armed process of this rank
RANK_VARS_ENV = "TORCHRUN_JSC_STACKS_RANK_VARS"  # the mode's rank variables, space-separated
TIMELINE_ENV = "TORCHRUN_JSC_TIMELINE"  # the job's timeline folder (launcher/node/job.sh)
RANK_ENVS = ("RANK",)  # where the jobscript names none
MODULE = "jsc_stacks_hook"  # this module in sys.modules, for torchrun_jsc_kit.progress()
MARK_WIDTH = 128  # bytes of a mark: rewritten in place, never truncated (a reader sees a whole one)
MARKS_PREFIX = "marks."  # progress/marks.NODE: one file per node, a MARK_WIDTH slot per rank
DUMP_PREFIX = "jsc-stacks"  # the name of a rank's (node-local, anonymous) dump file
_keep = []  # the open dump file: faulthandler writes to its descriptor
_calls = [0]  # torchrun_jsc_kit.progress() calls of this rank


def _rank(env):
    for var in env.get(RANK_VARS_ENV, "").split() or RANK_ENVS:
        value = env.get(var, "")
        if value.isdigit():
            return value
    return None


# The flight recorder's variables, (current name, deprecated name): torch >= 2.8 reads the
# TORCH_FR_* names and warns once per rank about each TORCH_NCCL_* one that is set
# (NVIDIA/nvidia-resiliency-ext#163: TORCH_NCCL_* before 2.8, TORCH_FR_* from 2.8). The
# jobscript sets both to one value (launcher/node/job.sh jsc_hangs_setup), for every torch.
FR_RENAMED = (("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"),
              ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"))


def _version(text):
    out = []
    for part in text.split("+")[0].split(".")[:2]:
        digits = ""
        for c in part:
            if not c.isdigit():
                break
            digits += c
        out.append(int(digits or 0))
    return tuple(out)


def drop_deprecated_fr(env, torch_version=None):
    """On torch >= 2.8, unset each deprecated flight-recorder name whose value is the current
    name's (nothing is lost; torch would only warn). A differing value stays: it is the
    user's. ``torch_version``: found from the installed metadata when None (no torch import)."""
    same = [old for new, old in FR_RENAMED if old in env and env.get(new) == env[old]]
    if not same:
        return []
    if torch_version is None:
        try:
            from importlib import metadata  # Python >= 3.8; older: keep both
            torch_version = metadata.version("torch")
        except Exception:
            return []
    if _version(torch_version) < (2, 8):
        return []
    for old in same:
        del env[old]
    return same


def _arm_stop(env):
    """job.requeue: hold the requeue signal until the program installs its own handler
    (torchrun_jsc_kit/stop.py), in the rank's first Python process only (as the stacks)."""
    rank = _rank(env)
    if rank is None or env.get(PID_ENV) or not env.get("REQUEUE_SIGNAL"):
        return
    from torchrun_jsc_kit import stop

    stop.arm(env, rank)


def _arm(env):
    directory, rank = env.get(DIR_ENV), _rank(env)
    if not directory or rank is None or env.get(PID_ENV):
        return
    drop_deprecated_fr(os.environ)
    import faulthandler
    import signal
    import _thread

    os.environ[PID_ENV] = str(os.getpid())
    host = _host()
    try:
        f = _dump_file(host)
    except OSError:
        return
    f.write("# jsc-stacks rank=%s local_rank=%s host=%s pid=%d main=%d argv=%s\n" % (
        rank, env.get("LOCAL_RANK", env.get("OMPI_COMM_WORLD_LOCAL_RANK", "?")),
        host, os.getpid(), _thread.get_ident(),
        " ".join(sys.argv[:1] or ["?"])[:200].replace("\n", " ")))
    f.flush()
    faulthandler.register(signal.SIGURG, file=f, all_threads=True, chain=False)
    _keep.append(f)
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_disarm)
    _arm_progress(directory, rank, _slot(env, rank), _node(env, host))


def _host():
    import socket

    return socket.gethostname().split(".")[0]


def _node(env, host):
    """This node's name as Slurm knows it (the file of its ranks' marks), else the host's."""
    return (env.get("SLURMD_NODENAME") or host).replace("/", "_")


def _slot(env, rank):
    """This rank's place in its node's mark file: its local rank (torchrun's, srun's, Open
    MPI's), else its rank (a sparse file, still one per node)."""
    for var in ("LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK"):
        value = env.get(var, "")
        if value.isdigit():
            return int(value)
    return int(rank)


def _dump_file(host):
    """The rank's dump file, node-local and nameless on shared storage: an anonymous memory
    file (memfd) named DUMP_PREFIX.HOST.PID, which the collector on this node finds and reads
    through /proc/PID/fd; where the kernel or Python has no memfd, a deleted temporary file
    of that name prefix (the same way in). Closed on exec: a forked child inherits it, but its
    pid is not the name's, so it is never taken for the rank."""
    name = "%s.%s.%d" % (DUMP_PREFIX, host, os.getpid())
    try:
        fd = os.memfd_create(name)
    except (AttributeError, OSError):
        import tempfile

        fd, path = tempfile.mkstemp(prefix=name + ".")
        os.unlink(path)
    return os.fdopen(fd, "w")


def phase(name, who=""):
    """One mark on the job's start-up timeline: the line "TIME NAME [WHO]" appended to this
    node's file in TIMELINE_ENV (launcher/node/job.sh jsc_mark writes the same; jsc-compose
    timeline reads them). One small append, no file per rank; never raises. torchrun_jsc (the
    per-node agent, which loads this hook too) marks its phases through it."""
    folder = os.environ.get(TIMELINE_ENV)
    if not folder:
        return
    try:
        import time

        line = "%.3f %s%s\n" % (time.time(), name, " " + who if who else "")
        path = os.path.join(folder, _node(os.environ, _host()))
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
    except Exception:
        pass


def _arm_timeline(env):
    """In a rank's first Python process: its start (workers_started), then, from a thread
    that looks every 10 ms (every 0.5 s after two minutes) and ends after its second mark,
    when torch.distributed's default group is up and when the rank issued its first
    collective (torch's sequence numbers, as the progress marks). Nothing is patched."""
    rank = _rank(env)
    if not env.get(TIMELINE_ENV) or rank is None or env.get(PID_ENV):
        return
    who = "rank=%s" % rank
    phase("workers_started", who)
    import threading

    threading.Thread(target=_startup_marks, args=(who,), name="jsc_timeline",
                     daemon=True).start()


def _startup_marks(who):
    import time

    t0, up = time.monotonic(), False
    while True:
        time.sleep(0.01 if time.monotonic() - t0 < 120 else 0.5)
        c10d = sys.modules.get("torch.distributed.distributed_c10d")
        if c10d is None:
            continue
        try:
            if not up and c10d.is_initialized():
                phase("process_group_up", who)
                up = True
            if up and _collectives()[1] > 0:
                phase("first_collective", who)
                return
        except Exception:  # torch still importing (half a module): look again
            pass


def progress():
    """torchrun_jsc_kit.progress(): the program says this rank made progress (an int increment)."""
    _calls[0] += 1


def _collectives():
    """(collectives issued in the default group, in all groups) by this rank so far: torch's
    sequence numbers, counted when a collective is issued (also by DDP's C++ reducer)."""
    c10d = sys.modules.get("torch.distributed.distributed_c10d")
    if c10d is None:
        return 0, 0
    world = getattr(c10d, "_world", None)
    groups = list(getattr(world, "pg_map", None) or getattr(c10d, "_pg_map", None) or ())
    default = getattr(world, "default_pg", None)
    own = total = 0
    for group in groups:
        try:
            n = int(group._get_sequence_number_for_group())
        except Exception:
            continue
        total += n
        if group is default:
            own = n
    return own, total


_marks_fd = {}  # path -> the descriptor this rank writes its marks through (opened once)


def _mark(path, slot, rank, token, state):
    """The rank's line, stamped with the time it noticed the count (not when the write lands:
    a write that storage holds up arrives with its own time, which the watcher reads as a
    stall, not as progress or its absence), written in place at its slot of the node's file.
    The file is opened once per rank (no open, lookup or close per mark: only the write) and
    each write is synced, so that a reader on another node sees it at once (NFS would keep it
    in this node's cache until a close); a failed write opens it again next time."""
    import time

    line = "rank=%s world=%d all=%d calls=%d t=%.3f state=%s" % (
        (rank,) + token + (time.time(), state))
    fd = _marks_fd.get(path)
    if fd is None:
        fd = _marks_fd[path] = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, (line.ljust(MARK_WIDTH - 1) + "\n").encode(), slot * MARK_WIDTH)
        os.fdatasync(fd)
    except OSError:
        del _marks_fd[path]
        os.close(fd)
        raise


def _arm_progress(directory, rank, slot, node):
    folder = os.path.join(directory, "progress")
    try:
        with open(os.path.join(folder, "period")) as f:
            period = max(0.1, float(f.read().strip()))
    except (OSError, ValueError):
        return  # no progress deadline in this job
    import atexit
    import threading
    import time

    path, pid = os.path.join(folder, MARKS_PREFIX + node), os.getpid()
    last = [(0, 0, 0)]

    def beat():
        while True:  # never ends on an error: a silent thread would read as a hang
            time.sleep(period)
            try:
                token = _collectives() + (_calls[0],)
                if token != last[0]:
                    _mark(path, slot, rank, token, "run")
                    last[0] = token
            except Exception:
                pass

    def done():
        if os.getpid() == pid:  # not in a forked child that returned
            try:  # the counts so far: destroy_process_group() has emptied torch's list
                now = _collectives() + (_calls[0],)
                _mark(path, slot, rank, tuple(max(a, b) for a, b in zip(now, last[0])),
                      "done")
            except Exception:
                pass

    _mark(path, slot, rank, last[0], "run")  # started: the first progress
    atexit.register(done)
    threading.Thread(target=beat, name="jsc_progress", daemon=True).start()


def _disarm():
    try:
        import faulthandler
        import signal

        faulthandler.unregister(signal.SIGURG)
    except Exception:
        pass


def _chain():
    """Run the sitecustomize that this one hides (the image's or the venv's), if any."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


sys.modules[MODULE] = sys.modules[__name__]
try:
    _arm_stop(os.environ)  # first: PID_ENV, set by _arm, marks this rank's process as armed
except Exception:
    pass
try:
    _arm_timeline(os.environ)  # before _arm, which sets PID_ENV
except Exception:
    pass
try:
    _arm(os.environ)
except Exception:
    pass
try:
    _chain()
except Exception:
    pass
