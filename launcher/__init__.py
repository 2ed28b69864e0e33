"""torchrun-jsc-kit: a patched torchrun (launcher.task.torchrun_jsc) and a Slurm jobscript composer.

No import-time side effects; only launcher.task.torchrun_jsc imports torch, and lazily.
"""

import sys

__version__ = "0.1.0"
HOOK_MODULE = "jsc_stacks_hook"  # as launcher.task.hook.sitecustomize.MODULE (the hook is shipped alone)


def progress() -> None:
    """Alias of ``torchrun_jsc_kit.progress()`` (launcher/task/hook/torchrun_jsc_kit), which
    every rank of a kit job can import: use that one."""
    hook = sys.modules.get(HOOK_MODULE)
    if hook is not None:
        hook.progress()
