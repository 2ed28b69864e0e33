"""Ring 1: is --local_addr honoured? Detected from torch's code, not its version (fakes).

pytorch/pytorch#135262 gave ``RendezvousStoreInfo.build`` its ``local_addr`` parameter; a
2.5.0a0 NGC build may predate it. The fakes stand in for torch's rendezvous api module.
"""

from __future__ import annotations

import sys
import types
from typing import Optional

import pytest

from launcher.task.torchrun_jsc import compat

API = "torch.distributed.elastic.rendezvous.api"


def fake_torch(monkeypatch, store_info: Optional[type]) -> None:
    names = ["torch", "torch.distributed", "torch.distributed.elastic",
             "torch.distributed.elastic.rendezvous", API]
    for name in names:
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    if store_info is not None:
        sys.modules[API].RendezvousStoreInfo = store_info  # type: ignore[attr-defined]


class WithLocalAddr:  # torch >= 2.5 (after #135262)
    @staticmethod
    def build(rank, store, local_addr, server_port=None):
        pass


class WithoutLocalAddr:  # torch 2.4 and a 2.5.0a0 that predates #135262 (#125743 only)
    @staticmethod
    def build(rank, store):
        pass


@pytest.mark.parametrize("store_info,want", [
    (WithLocalAddr, True),
    (WithoutLocalAddr, False),
    (None, False),  # torch < 2.4: no RendezvousStoreInfo at all
])
def test_supports_local_addr(monkeypatch, store_info, want):
    fake_torch(monkeypatch, store_info)
    assert compat.supports_local_addr() is want


def test_no_torch(monkeypatch):
    for name in ("torch", API):  # None in sys.modules: importing it raises ImportError
        monkeypatch.setitem(sys.modules, name, None)
    assert compat.supports_local_addr() is False


def test_module_import_does_not_import_torch():
    import subprocess
    code = ("import sys, launcher.task.torchrun_jsc, launcher.task.torchrun_jsc.compat, "
            "launcher.task.torchrun_jsc.netinfo; print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "False"
