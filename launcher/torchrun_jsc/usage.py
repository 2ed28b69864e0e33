"""torchrun_jsc's ``--help``: torch's own parser under torchrun_jsc's name, plus its variables.

Where it sits: the argument-parsing edge of ``main``. With torch, ``parser(torch_run)`` is
torch's parser (every flag, alias and PET_* variable) renamed and given an epilog; without
torch, ``help_without_torch`` prints the same epilog and says that launching needs torch.
No torch import here.
"""

from __future__ import annotations

import argparse
import textwrap
from types import ModuleType
from typing import Sequence, Tuple

PROG = "torchrun_jsc"

# (name, meaning): the README's "Environment variables" table; a test keeps both in step
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
    ("GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME", "yours win; set for workers only when unset"),
)

DESCRIPTION = ("A drop-in torchrun that rendezvouses when the node's hostname is not the "
               "endpoint's name (jwb0001 vs jwb0001i). Accepts every torchrun argument.")

EXAMPLES = """\
examples:
  # one per node, e.g. from `srun --ntasks-per-node=1`:
  torchrun_jsc --nnodes="$SLURM_JOB_NUM_NODES" --nproc_per_node=4 \\
      --rdzv_backend=c10d --rdzv_endpoint=jwb0001i:29400 --rdzv_id="$SLURM_JOB_ID" train.py
  torchrun_jsc --standalone --nproc_per_node=2 train.py     # one node: runs torchrun unchanged
  apptainer run image.sif torchrun_jsc --nnodes=2 ... train.py"""


def epilog() -> str:
    indent = " " * 6
    rows = "\n".join(f"  {name}\n" + textwrap.fill(meaning, 79, initial_indent=indent,
                                                    subsequent_indent=indent)
                     for name, meaning in ENV_VARS)
    return f"environment variables:\n{rows}\n\n{EXAMPLES}"


def parser(torch_run: ModuleType) -> argparse.ArgumentParser:
    """torch's torchrun parser, named torchrun_jsc and with torchrun_jsc's epilog."""
    p = torch_run.get_args_parser()
    p.prog = PROG
    p.description = f"{DESCRIPTION}\n\n{p.description or ''}".rstrip()
    p.epilog = epilog()
    p.formatter_class = argparse.RawDescriptionHelpFormatter  # keep the epilog's layout
    return p


def wants_help(argv: Sequence[str]) -> bool:
    # Without torch there is no parser to tell an option from the script's own --help;
    # either way nothing could be launched, so the help is the useful answer.
    return "-h" in argv or "--help" in argv


def help_without_torch(error: str) -> str:
    note = (f"torch is not importable here ({error}): launching needs torch >= 1.9; with it, "
            f"{PROG} --help also lists every torchrun option.")
    return (f"usage: {PROG} [torchrun options] TRAINING_SCRIPT [ARGS ...]\n\n"
            f"{textwrap.fill(DESCRIPTION, 79)}\n\n{textwrap.fill(note, 79)}\n\n{epilog()}\n")
