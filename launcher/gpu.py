"""Alias of torchrun_jsc_kit.gpu (the device rule), for programs written for ``launcher.gpu``.

New programs import ``torchrun_jsc_kit`` (launcher/task/hook/torchrun_jsc_kit), which every rank
of a kit job can import, whether or not its image has the kit installed."""

from launcher.task.hook.torchrun_jsc_kit.gpu import *  # noqa: F401,F403
from launcher.task.hook.torchrun_jsc_kit.gpu import __all__  # noqa: F401
