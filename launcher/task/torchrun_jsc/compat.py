"""Fallback for torch without a working ``--local_addr`` (and TORCHRUN_JSC_PREFER_OLD_SOLUTION).

Which torch needs it is detected from torch itself (``supports_local_addr``), not from its
version string: NGC ships pre-release builds such as 2.5.0a0 that may predate the fix.

Why (pytorch/pytorch#73656): before torch 2.5 there is no ``--local_addr``. The agent's
node descriptor and the MASTER_ADDR it publishes come from ``socket.getfqdn()``
(``_NodeDescGenerator.generate``, ``SimpleElasticAgent._set_master_addr_port`` via
``_get_fq_hostname``, 2.4's ``RendezvousStoreInfo.build``), and torch 1.9 ignores
``is_host`` in ``--rdzv_conf`` and asks ``_matches_machine_hostname``. So, in the agent
process only (workers are separate processes), two functions are replaced: getfqdn returns
the reachable address, and the hostname match returns the decided is_host. This is the
smallest patch that covers every version in the range; it is applied only behind the one
version check in ``decide.decide`` (``Decision.old_torch_fallback``).
"""

from __future__ import annotations

import inspect
import socket
from typing import Callable, Optional


def supports_local_addr() -> bool:
    """Does this torch publish ``--local_addr`` as MASTER_ADDR? (pytorch/pytorch#135262)

    #125743 (torch 2.4) moved MASTER_ADDR into ``RendezvousStoreInfo.build(rank, store)``,
    which used ``socket.getfqdn()`` and so ignored ``--local_addr``; #135262 (torch 2.5) gave
    ``build`` a ``local_addr`` parameter and passed it from every rendezvous handler. So the
    feature is that parameter. Torch without ``RendezvousStoreInfo`` (< 2.4) gets the
    fallback too, the one tested for real on 1.9-2.4. Imported lazily, only when asked.
    """
    try:
        from torch.distributed.elastic.rendezvous.api import RendezvousStoreInfo
        params = inspect.signature(RendezvousStoreInfo.build).parameters
    except (ImportError, AttributeError, TypeError, ValueError):
        return False
    return "local_addr" in params


def install(local_addr: Optional[str], is_host: Optional[bool]) -> None:
    """Patch the agent process for old torch. Call once, just before torch's run()."""
    if local_addr:
        original: Callable[..., str] = socket.getfqdn
        own = {"", socket.gethostname()}

        def getfqdn(name: str = "") -> str:
            return local_addr if name in own else original(name)

        socket.getfqdn = getfqdn  # type: ignore[assignment]
    if is_host is not None:
        from torch.distributed.elastic.rendezvous import c10d_rendezvous_backend as backend

        backend._matches_machine_hostname = lambda host: is_host  # type: ignore[attr-defined]
