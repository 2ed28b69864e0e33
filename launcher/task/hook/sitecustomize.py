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
waits in NCCL or gloo) appends every thread's Python stack to
``STACKS_DIR/rank-R.host-H.pid-P.txt`` (process ids repeat across nodes: the collector matches
host and pid). Any other sitecustomize on the path after this one still runs.

Requeue (only where REQUEUE_SIGNAL is set: the spec sets job.requeue): the rank holds that
signal blocked until the program installs a handler for it, then hands it over
(torchrun_jsc_kit/stop.py): a rank still importing torch does not die of it, and the program's
own handler (Lightning's, submitit's, a plain signal.signal) gets it.

Progress (only where the directory ``STACKS_DIR/progress`` exists: the spec sets
launch.hang_timeout): one daemon thread wakes every ``progress/period`` seconds and reads how
many collectives this rank has issued (torch's per-group sequence numbers, summed over every
process group, once torch.distributed is imported: nothing is patched or wrapped) and how often
the program called ``torchrun_jsc_kit.progress()``; when either moved it rewrites the one-line mark
``progress/rank-R``. At exit the mark says done. The watcher in the batch shell
(launcher.node.stacks ``watch``) reads the marks. Nothing runs per step.
"""

import os
import sys

DIR_ENV = "TORCHRUN_JSC_STACKS"  # the directory the dumps go to (set by the jobscript)
PID_ENV = "TORCHRUN_JSC_STACKS_PID"  # the armed process of this rank
RANK_VARS_ENV = "TORCHRUN_JSC_STACKS_RANK_VARS"  # the mode's rank variables, space-separated
RANK_ENVS = ("RANK",)  # where the jobscript names none
MODULE = "jsc_stacks_hook"  # this module in sys.modules, for torchrun_jsc_kit.progress()
MARK_WIDTH = 128  # bytes of a mark: rewritten in place, never truncated (a reader sees a whole one)
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
    import socket
    import _thread

    os.environ[PID_ENV] = str(os.getpid())
    host = socket.gethostname().split(".")[0]
    stacks = os.path.join(directory, "stacks")
    path = os.path.join(stacks, "rank-%s.host-%s.pid-%d.txt" % (rank, host, os.getpid()))
    try:
        f = open(path, "a")
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
    _arm_progress(directory, rank)


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


def _mark(path, token, state):
    import time

    line = "world=%d all=%d calls=%d t=%.3f state=%s" % (token + (time.time(), state))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line.ljust(MARK_WIDTH - 1) + "\n").encode())
    finally:
        os.close(fd)


def _arm_progress(directory, rank):
    folder = os.path.join(directory, "progress")
    try:
        with open(os.path.join(folder, "period")) as f:
            period = max(0.1, float(f.read().strip()))
    except (OSError, ValueError):
        return  # no progress deadline in this job
    import atexit
    import threading
    import time

    path, pid = os.path.join(folder, "rank-%s" % rank), os.getpid()
    last = [(0, 0, 0)]

    def beat():
        while True:  # never ends on an error: a silent thread would read as a hang
            time.sleep(period)
            try:
                token = _collectives() + (_calls[0],)
                if token != last[0]:
                    _mark(path, token, "run")
                    last[0] = token
            except Exception:
                pass

    def done():
        if os.getpid() == pid:  # not in a forked child that returned
            try:  # the counts so far: destroy_process_group() has emptied torch's list
                now = _collectives() + (_calls[0],)
                _mark(path, tuple(max(a, b) for a, b in zip(now, last[0])), "done")
            except Exception:
                pass

    _mark(path, last[0], "run")  # started: the first progress
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
    _arm(os.environ)
except Exception:
    pass
try:
    _chain()
except Exception:
    pass
