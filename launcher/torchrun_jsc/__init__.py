"""torchrun_jsc: a drop-in ``torchrun`` that rendezvouses when hostname != endpoint name.

Flow: torch's own parser (every flag, alias and PET_* variable) -> ``decide.Request`` +
``netinfo.probe`` -> ``decide.decide`` (pure) -> ``decide.apply`` on a copy of the parsed
namespace -> torch's own ``torch.distributed.run.run``. torch is imported lazily, in
``main`` only. See decide.py for why (pytorch/pytorch#73656).
"""

from __future__ import annotations

import os
import re
import sys
from typing import List, Mapping, Optional, Tuple

from .decide import (Decision, LaunchError, NetFacts, Request, apply, decide, describe,
                     MIN_TORCH, parse_endpoint, passthrough_reason)
from . import usage

__all__ = ["main"]


def torch_version(text: str) -> Tuple[int, int]:
    m = re.match(r"(\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def request_from_args(args, env: Mapping[str, str], version: Tuple[int, int]) -> Request:
    """The decision's input from torch's parsed namespace (CLI and PET_* already merged)."""
    return Request(
        rdzv_backend=args.rdzv_backend, rdzv_endpoint=args.rdzv_endpoint or "",
        rdzv_conf=args.rdzv_conf or "", local_addr=getattr(args, "local_addr", None),
        standalone=bool(args.standalone), env=dict(env), torch_version=version)


def _decide(args, version: Tuple[int, int]) -> Decision:
    req = request_from_args(args, os.environ, version)
    if passthrough_reason(req):
        return decide(req, NetFacts())  # nothing to patch: no network probing
    from .netinfo import probe

    return decide(req, probe(parse_endpoint(req.rdzv_endpoint)))


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        import torch
    except ImportError as e:
        if usage.wants_help(argv):  # --help works on a login node without torch
            print(usage.help_without_torch(str(e)), end="")
            return 0
        print(f"torchrun_jsc: cannot import torch ({e}); install torch >= 1.9", file=sys.stderr)
        return 2
    version = torch_version(torch.__version__)
    if version < MIN_TORCH:  # before torch.distributed.run existed: refuse in one line
        print(f"torchrun_jsc: error: torch {torch.__version__} is too old; torchrun_jsc needs "
              "torch >= 1.9 (the first with torchrun)", file=sys.stderr)
        return 2
    from torch.distributed import run as torch_run
    args = usage.parser(torch_run).parse_args(argv)
    try:
        d = _decide(args, version)
    except LaunchError as e:
        print(f"torchrun_jsc: error: {e}", file=sys.stderr)
        return 2
    print(describe(d, args.rdzv_endpoint), file=sys.stderr, flush=True)
    for name, value in d.worker_env:
        os.environ[name] = value
    if d.patch and d.old_torch_fallback:
        from . import compat

        compat.install(d.local_addr, d.is_host)
    torch_run.run(apply(args, d))
    return 0
