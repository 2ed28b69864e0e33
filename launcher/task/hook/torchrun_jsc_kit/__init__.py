"""torchrun_jsc_kit: what a training program may call of the kit, in every kit job and image.

Where it sits: in the program. Every task of a kit job starts through launcher/task/hook.sh,
which puts this package's folder (the kit's launcher/task/hook, bound read-only into the
container) first on PYTHONPATH: ``import torchrun_jsc_kit`` works on every rank, in every
launch mode and runtime, whether or not the image has the kit installed, and always imports
the kit that runs the job (never an image's other copy). ``pip install`` of the kit installs it
too, so the same program runs outside a job, where every call is a no-op or the plain rule.
Standard library only (torch is passed in or imported lazily), Python >= 3.8, nothing happens at
import.

    import torchrun_jsc_kit as kit
    stop = kit.StopRequest()            # job.requeue: first thing in the program
    device = kit.select_device(torch)   # cuda:LOCAL_RANK, cuda:0, or one line and exit
    ...
    kit.progress()                      # launch.hang_timeout: progress without collectives
    if stop.agree(): save(); stop.mark_stopped("step 42"); return 0

A program's own handler for the requeue signal (Lightning's SLURM auto-requeue, submitit's, a
plain ``signal.signal(SIGUSR2, ...)``) needs none of this: the hook holds the signal until the
program installs its handler, then hands it over (docs/guide/requeue.md).
"""

import sys

from .gpu import device_index, select_device
from .requeue import MARKER_ENV, SIGNAL_ENV, StopRequest

__version__ = "0.1.0"  # the kit's (launcher.__version__; a ring-1 test keeps them equal)
HOOK_MODULE = "jsc_stacks_hook"  # the stack hook in sys.modules (hook/sitecustomize.py)


def progress() -> None:
    """Tell the kit's progress deadline (launch.hang_timeout, docs/guide/hangs.md) that this
    rank made progress: for stretches without collectives (evaluation on one rank, a long
    checkpoint write) or programs whose steps issue none. Costs a dictionary look-up and an
    increment; does nothing outside a job rendered by the kit."""
    hook = sys.modules.get(HOOK_MODULE)
    if hook is not None:
        hook.progress()


__all__ = ["MARKER_ENV", "SIGNAL_ENV", "StopRequest", "device_index", "progress",
           "select_device"]
