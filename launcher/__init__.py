"""torchrun-jsc-kit: a patched torchrun (launcher.task.torchrun_jsc) and a Slurm jobscript composer.

No import-time side effects; only launcher.task.torchrun_jsc imports torch, and lazily.
"""

import sys

__version__ = "0.1.0"
HOOK_MODULE = "jsc_stacks_hook"  # as launcher.task.hook.sitecustomize.MODULE (the hook is shipped alone)


def progress() -> None:
    """Tell the kit's progress deadline (launch.hang_timeout, docs/guide/hangs.md) that this
    rank made progress: for stretches without collectives (evaluation on one rank, a long
    checkpoint write) or programs whose steps issue none. Costs a dictionary look-up and an
    increment; does nothing outside a job rendered by the kit."""
    hook = sys.modules.get(HOOK_MODULE)
    if hook is not None:
        hook.progress()
