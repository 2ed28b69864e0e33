"""The stack hook: shipped as ``sitecustomize.py`` on the workers' PYTHONPATH (docs/guide/hangs.md).

Where it sits: spec -> jobscript (launcher.hangs_script writes this file's text into the
job's directory ``.hangs/JOBID/hook/`` and puts that on PYTHONPATH) -> every Python process
of the job imports it at start-up -> ``launcher.stacks`` (``jsc-compose stacks JOBID``, or the
jobscript before the job is killed) signals the ranks and reads what they wrote.

Standard library only, Python >= 3.6, no output, never raises. It arms only a rank: a
process with RANK (torchrun, srun and the per-node launchers' workers) or an MPI rank
variable, and only the first Python process of that rank (children inherit
TORCHRUN_JSC_STACKS_PID and stay unarmed: DataLoader workers, subprocesses; forked children
are disarmed at fork). Arming costs one open file; nothing runs until SIGURG comes, whose
default action is to be ignored, so the same signal reaching an unarmed process does nothing.
Then faulthandler (C code, no GIL needed: also while the rank waits in NCCL or gloo) appends
every thread's Python stack to ``STACKS_DIR/rank-R.pid-P.txt``. Any other sitecustomize on
the path after this one still runs.
"""

import os
import sys

DIR_ENV = "TORCHRUN_JSC_STACKS"  # the directory the dumps go to (set by the jobscript)
PID_ENV = "TORCHRUN_JSC_STACKS_PID"  # the armed process of this rank
RANK_ENVS = ("RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK")
_keep = []  # the open dump file: faulthandler writes to its descriptor


def _rank(env):
    for var in RANK_ENVS:
        value = env.get(var, "")
        if value.isdigit():
            return value
    return None


def _arm(env):
    directory, rank = env.get(DIR_ENV), _rank(env)
    if not directory or rank is None or env.get(PID_ENV):
        return
    import faulthandler
    import signal
    import socket
    import _thread

    os.environ[PID_ENV] = str(os.getpid())
    stacks = os.path.join(directory, "stacks")
    path = os.path.join(stacks, "rank-%s.pid-%d.txt" % (rank, os.getpid()))
    try:
        f = open(path, "a")
    except OSError:
        return
    f.write("# jsc-stacks rank=%s local_rank=%s host=%s pid=%d main=%d argv=%s\n" % (
        rank, env.get("LOCAL_RANK", env.get("OMPI_COMM_WORLD_LOCAL_RANK", "?")),
        socket.gethostname().split(".")[0], os.getpid(), _thread.get_ident(),
        " ".join(sys.argv[:1] or ["?"])[:200].replace("\n", " ")))
    f.flush()
    faulthandler.register(signal.SIGURG, file=f, all_threads=True, chain=False)
    _keep.append(f)
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_disarm)


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


try:
    _arm(os.environ)
except Exception:
    pass
try:
    _chain()
except Exception:
    pass
