"""torchrun_jsc's open-file check for the rendezvous store (launcher/task/torchrun_jsc/
store_limits.py, issue 36): on the store host only, the soft limit raised to N x (P + 1) + 64
where the hard limit allows, with one line; a warning line naming pytorch/pytorch#144856 where
it does not; silence when the limit suffices or on other nodes."""

from __future__ import annotations

from typing import List, Optional, Tuple

import pytest

from launcher.task.torchrun_jsc import store_limits


class Limits:
    def __init__(self, soft: int, hard: int) -> None:
        self.soft, self.hard = soft, hard
        self.set: List[Tuple[int, int]] = []

    def get(self) -> Tuple[int, int]:
        return self.soft, self.hard

    def put(self, soft: int, hard: int) -> None:
        self.set.append((soft, hard))


def run(lim: Limits, is_host: Optional[bool], nnodes: str = "256",
        nproc: str = "4") -> Optional[str]:
    return store_limits.check(is_host, nnodes, nproc, lim.get, lim.put)


def test_raises_the_soft_limit_on_the_store_host_and_says_so():
    lim = Limits(1024, 524288)
    line = run(lim, True)
    assert lim.set == [(256 * 5 + 64, 524288)]
    assert line == ("torchrun_jsc: the rendezvous store on this node takes up to 1280 "
                    "connections (256 agents + 1024 workers): open-file limit raised from "
                    "1024 to 1344")


def test_a_hard_limit_too_low_gets_a_warning_with_the_cause_and_the_soft_limit_at_it():
    lim = Limits(1024, 1024)
    line = run(lim, True, nnodes="1:512", nproc="gpu")
    assert lim.set == [(1024, 1024)]
    assert line.startswith("torchrun_jsc: warning: the rendezvous store on this node takes up "
                           "to 4608 connections (512 agents + 4096 workers) but this node "
                           "allows 1024 open files (ulimit -Hn): agents beyond that fail with "
                           "RendezvousConnectionError or wait for the join timeout "
                           "(pytorch/pytorch#144856)"), line


@pytest.mark.parametrize("is_host, soft, hard", [
    (True, 1344, 1344),  # exactly enough
    (True, store_limits.UNLIMITED, store_limits.UNLIMITED),
    (False, 16, 16),  # not the store host: its agent holds one connection
    (None, 16, 16),  # torchrun decides (pass-through): not ours to change
])
def test_silent_when_enough_or_not_the_store_host(is_host, soft, hard):
    lim = Limits(soft, hard)
    assert run(lim, is_host) is None and lim.set == []


def test_unlimited_hard_limit_raises_to_what_is_needed():
    lim = Limits(1024, store_limits.UNLIMITED)
    assert "raised from 1024 to 2112" in run(lim, True, nnodes="512", nproc="3")
    assert lim.set == [(2112, store_limits.UNLIMITED)]


def test_a_bad_node_count_is_left_to_torchs_parser():
    lim = Limits(16, 16)
    assert run(lim, True, nnodes="two") is None and lim.set == []
