"""torchrun_jsc's ``--help``: torch's own parser under torchrun_jsc's name, plus its variables.

Where it sits: the argument-parsing edge of ``main``. With torch, ``parser(torch_run)`` is
torch's parser (every flag, alias and PET_* variable) renamed and given an epilog; without
torch, ``help_without_torch`` prints the same epilog and says that launching needs torch.
No torch import here.
"""

from __future__ import annotations

import argparse
import textwrap
from pathlib import Path
from types import ModuleType
from typing import Callable, List, Optional, Sequence, Tuple

from launcher import __version__

from .decide import MIN_TORCH_TEXT

PROG = "torchrun_jsc"
DISTRIBUTION = "torchrun-jsc-kit"

# (name, meaning): the "Environment variables" table of docs/reference/torchrun-jsc.md; a test keeps both in step
# with the names the launcher reads.
ENV_VARS: Tuple[Tuple[str, str], ...] = (
    ("TORCHRUN_JSC_NODE_RANK", "this node's rank (else SLURM_NODEID); setting it makes the "
                               "rank rule decide is_host"),
    ("TORCHRUN_JSC_HOST_NODE_RANK", "rank of the node that hosts the store (default 0)"),
    ("TORCHRUN_JSC_RESOLVE_TIMEOUT", "seconds to wait for the endpoint name to resolve"),
    ("TORCHRUN_JSC_ADDRESS_FAMILY", "which address family (IPv4/IPv6) of the endpoint to use"),
    ("TORCHRUN_JSC_PREFER_OLD_SOLUTION=1", "use the monkey-patching fallback even on "
                                           "torch >= 2.5"),
    ("TORCHRUN_JSC_PREFER_ARG_PATCHING=0", "same (compatible with the torchrun_jsc package)"),
    ("TORCHRUN_JSC_FORWARD_SIGNALS=USR2", "survive these signals (USR1, USR2) and pass them "
                                          "on to workers that catch them (job.requeue)"),
    ("TORCHRUN_JSC_TIMELINE", "a folder: mark this node's start-up phases there (set by "
                              "the kit's jobscripts; jsc-compose timeline)"),
    ("GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME", "yours win; set for workers only when unset"),
)

# torchrun's --numa-binding (torch/distributed/run.py since torch 2.9): each worker bound to
# the CPUs near its GPU, run under numactl (torch.numa.binding refuses to start without it).
# On an older torch, whose parser lacks the flag, a hidden stand-in takes it so that
# ``numa_problem`` can say so in one line instead of argparse's usage error.
NUMA_FLAGS = ("--numa-binding", "--numa_binding")
NUMA_MIN_TORCH_TEXT = "2.9"
_NUMA_STAND_IN = "torchrun_jsc_numa_binding"

DESCRIPTION = ("A drop-in torchrun that rendezvouses when the node's hostname is not the "
               "endpoint's name (jwb0001 vs jwb0001i). Accepts every torchrun argument.")

EXAMPLES = """\
examples:
  # one per node, e.g. from `srun --ntasks-per-node=1`:
  torchrun_jsc --nnodes="$SLURM_JOB_NUM_NODES" --nproc_per_node=4 \\
      --rdzv_backend=c10d --rdzv_endpoint=jwb0001i:29400 --rdzv_id="$SLURM_JOB_ID" train.py
  torchrun_jsc --standalone --nproc_per_node=2 train.py     # one node: runs torchrun unchanged
  torchrun_jsc --version      # which torchrun_jsc this is (JSC's PyPI package has no --version)
  apptainer run image.sif torchrun_jsc --nnodes=2 ... train.py"""


def epilog() -> str:
    indent = " " * 6
    rows = "\n".join(f"  {name}\n" + textwrap.fill(meaning, 79, initial_indent=indent,
                                                    subsequent_indent=indent)
                     for name, meaning in ENV_VARS)
    return f"environment variables:\n{rows}\n\n{EXAMPLES}"


def version_text() -> str:
    """What ``--version`` prints: this distribution, its version and where it was loaded from.

    The command name ``torchrun_jsc`` is also the console script of JSC's own PyPI package
    ``torchrun_jsc`` (HelmholtzAI-FZJ); whichever was installed last owns it. That one has no
    ``--version`` (torch's parser answers with a usage error), so this line tells them apart.
    """
    where = Path(__file__).resolve().parent
    return (f"{PROG} {__version__} ({DISTRIBUTION}, {where})\n"
            f"not the PyPI package torchrun_jsc (HelmholtzAI-FZJ); accepts its CLI and "
            f"TORCHRUN_JSC_* variables")


def wants_version(argv: Sequence[str]) -> bool:
    # Only as the first argument, before the torch import: later ones may be the training
    # script's own --version (torch's parser, which has the flag too, tells those apart).
    return bool(argv) and argv[0] == "--version"


def torch_parser(torch_run: ModuleType) -> argparse.ArgumentParser:
    """The parser torch's own ``torchrun`` parses with, legacy options included.

    ``get_args_parser()`` is not all of it everywhere: torch 1.9's ``parse_args(args)`` adds
    the legacy ``--use_env`` (default True) to that parser before parsing, and its ``run()``
    reads ``args.use_env`` (without it every launch dies with ``'Namespace' object has no
    attribute 'use_env'``). So torch's own ``parse_args`` is called once, with
    ``get_args_parser`` recording the parser it builds and that parser's ``parse_args``
    answering nothing; both are restored before return. Whatever a torch release adds there,
    the namespace parsed with the returned parser is the one torchrun would build.
    """
    built: List[argparse.ArgumentParser] = []
    original = torch_run.get_args_parser
    if not callable(getattr(torch_run, "parse_args", None)):
        return original()

    def recording() -> argparse.ArgumentParser:
        p = original()
        p.parse_args = lambda *a, **k: argparse.Namespace()  # type: ignore[method-assign]
        built.append(p)
        return p

    torch_run.get_args_parser = recording
    try:
        torch_run.parse_args([])
    finally:
        torch_run.get_args_parser = original
        for p in built:
            del p.parse_args  # the instance attribute: argparse's method again
    return built[0] if built else original()


def parser(torch_run: ModuleType) -> argparse.ArgumentParser:
    """torch's torchrun parser, named torchrun_jsc, with torchrun_jsc's epilog and --version."""
    p = torch_parser(torch_run)
    p.prog = PROG
    p.description = f"{DESCRIPTION}\n\n{p.description or ''}".rstrip()
    p.epilog = epilog()
    p.formatter_class = argparse.RawDescriptionHelpFormatter  # keep the epilog's layout
    if "--version" not in p._option_string_actions:  # never shadow a flag torch may add
        # argparse %-formats the version string; REMAINDER keeps `train.py --version` the
        # script's. No dest in the namespace (SUPPRESS), so the parsed values are torch's.
        p.add_argument("--version", action="version",
                       version=version_text().replace("%", "%%"),
                       help="print which torchrun_jsc this is (distribution, version, path)")
    if NUMA_FLAGS[0] not in p._option_string_actions:  # torch < 2.9: see NUMA_FLAGS
        p.add_argument(*NUMA_FLAGS, dest=_NUMA_STAND_IN, default=argparse.SUPPRESS,
                       help=argparse.SUPPRESS)
    return p


def numa_problem(args: argparse.Namespace, torch_version: str,
                 which: Callable[[str], Optional[str]]) -> str:
    """Why --numa-binding (jsc-compose's launch.numa_binding) cannot work here, or ''."""
    if hasattr(args, _NUMA_STAND_IN):
        return (f"--numa-binding (launch.numa_binding) needs torch >= {NUMA_MIN_TORCH_TEXT} "
                f"in the image; this image has torch {torch_version}")
    if getattr(args, "numa_binding", None) and which("numactl") is None:
        return ("--numa-binding (launch.numa_binding) runs every worker under numactl, which "
                "is not on the PATH here: install numactl in the image (the kit's images have it)")
    return ""


def wants_help(argv: Sequence[str]) -> bool:
    # Without torch there is no parser to tell an option from the script's own --help;
    # either way nothing could be launched, so the help is the useful answer.
    return "-h" in argv or "--help" in argv


def help_without_torch(error: str) -> str:
    note = (f"torch is not importable here ({error}): launching needs torch >= "
            f"{MIN_TORCH_TEXT}; with it, "
            f"{PROG} --help also lists every torchrun option.")
    return (f"usage: {PROG} [torchrun options] TRAINING_SCRIPT [ARGS ...]\n\n"
            f"{textwrap.fill(DESCRIPTION, 79)}\n\n{textwrap.fill(note, 79)}\n\n{epilog()}\n")
