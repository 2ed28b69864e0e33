"""torchrun_jsc: a drop-in ``torchrun`` that rendezvouses when hostname != endpoint name.

Flow: torch's own parser (every flag, alias and PET_* variable) -> ``decide.Request`` +
``netinfo.probe`` -> ``decide.decide`` (pure) -> ``decide.apply`` on a copy of the parsed
namespace -> torch's own ``torch.distributed.run.run``, wrapped in torch's ``record`` as
torchrun's own main is (error file, faulthandler). torch is imported lazily, in ``main``
only. See decide.py for why (pytorch/pytorch#73656). With TORCHRUN_JSC_FORWARD_SIGNALS=USR2
(set by jobscripts with job.requeue) the agent survives that signal and passes it on to its
workers (forward.py).

Exit status: 2 for torchrun_jsc's own one-line errors (bad input, an endpoint that does not
resolve or that it refuses); otherwise what torchrun gives.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
from dataclasses import replace
from types import ModuleType
from typing import List, Mapping, Optional, Tuple

from launcher.node.net.addresses import address_family, resolve_timeout
from .decide import (Decision, LaunchError, NetFacts, Request, apply, decide, describe,
                     MIN_TORCH, MIN_TORCH_TEXT, parse_endpoint, passthrough_reason)
from . import forward, phases, usage

__all__ = ["main"]


def torch_version(text: str) -> Tuple[int, int]:
    m = re.match(r"(\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def request_from_args(args: argparse.Namespace, env: Mapping[str, str],
                      version: Tuple[int, int], local_addr_supported: bool = True) -> Request:
    """The decision's input from torch's parsed namespace (CLI and PET_* already merged)."""
    return Request(
        rdzv_backend=args.rdzv_backend, rdzv_endpoint=args.rdzv_endpoint or "",
        rdzv_conf=args.rdzv_conf or "", local_addr=getattr(args, "local_addr", None),
        standalone=bool(args.standalone), env=dict(env), torch_version=version,
        local_addr_supported=local_addr_supported)


def _decide(args: argparse.Namespace, version: Tuple[int, int]) -> Decision:
    req = request_from_args(args, os.environ, version)
    if passthrough_reason(req):
        return decide(req, NetFacts())  # nothing to patch: no network probing
    from . import compat
    from .netinfo import probe

    req = replace(req, local_addr_supported=compat.supports_local_addr())
    facts = probe(parse_endpoint(req.rdzv_endpoint), address_family(req.env),
                  resolve_timeout(req.env))
    return decide(req, facts)


def _launch(torch_run: ModuleType, args: argparse.Namespace, d: Decision) -> None:
    for name, value in d.worker_env:
        os.environ[name] = value
    if d.patch and d.old_torch_fallback:
        from . import compat

        compat.install(d.local_addr, d.is_host)
    if getattr(args, "numa_binding", None):  # GH200's memory-only NUMA nodes (numa.py)
        from torch.numa import binding

        from . import numa

        numa.install(binding)
    torch_run.run(apply(args, d))


def _store_limits(args: argparse.Namespace, d: Decision) -> None:
    """On the store host, the open files its connections need (store_limits.py)."""
    import resource

    from . import store_limits

    line = store_limits.check(
        d.is_host, args.nnodes, args.nproc_per_node,
        lambda: resource.getrlimit(resource.RLIMIT_NOFILE),
        lambda soft, hard: resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard)))
    if line:
        print(line, file=sys.stderr, flush=True)


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if usage.wants_version(argv):  # no torch needed (nor its seconds of import)
        print(usage.version_text())
        return 0
    try:
        # First, before the torch import (seconds on a busy node): until then a forwarded
        # signal's default action would end the agent (job 151's first attempt did so).
        forward.install(os.environ)
    except forward.ForwardError as e:
        print(f"torchrun_jsc: error: {e}", file=sys.stderr)
        return 2
    try:
        import torch
    except ImportError as e:
        if usage.wants_help(argv):  # --help works on a login node without torch
            print(usage.help_without_torch(str(e)), end="")
            return 0
        print(f"torchrun_jsc: cannot import torch ({e}); install torch >= {MIN_TORCH_TEXT}",
              file=sys.stderr)
        return 2
    version = torch_version(torch.__version__)
    if version < MIN_TORCH:  # before torch.distributed.run existed: refuse in one line
        print(f"torchrun_jsc: error: torch {torch.__version__} is too old; torchrun_jsc needs "
              f"torch >= {MIN_TORCH_TEXT} (the first with torchrun)", file=sys.stderr)
        return 2
    from torch.distributed import run as torch_run
    args = usage.parser(torch_run).parse_args(argv)
    problem = usage.numa_problem(args, torch.__version__, shutil.which)
    if problem:
        print(f"torchrun_jsc: error: {problem}", file=sys.stderr)
        return 2
    try:
        d = _decide(args, version)
    except LaunchError as e:
        print(f"torchrun_jsc: error: {e}", file=sys.stderr)
        return 2
    print(describe(d, args.rdzv_endpoint), file=sys.stderr, flush=True)
    phases.mark("decided")  # the job's start-up timeline (phases.py)
    phases.install(args.rdzv_endpoint or "", d.is_host, str(args.nnodes))
    _store_limits(args, d)
    # As torchrun's own main: TORCHELASTIC_ERROR_FILE gets the first failed worker's root
    # cause (or the agent's exception), and faulthandler is on. In torch since 1.9.
    from torch.distributed.elastic.multiprocessing.errors import record

    record(_launch)(torch_run, args, d)
    return 0
