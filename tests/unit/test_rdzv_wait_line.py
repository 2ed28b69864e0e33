"""Issue 36 item 6: a rendezvous that takes long is not a silent wait. torchrun_jsc's wrapper
of torch's SimpleElasticAgent._rendezvous (launcher/task/torchrun_jsc/phases.py) says after
WAIT_FIRST_S, then every WAIT_EVERY_S, that this node still waits at the endpoint and where
to see which nodes are missing; a rendezvous done in time says nothing. Synchronised by
events, not sleeps: the stand-in rendezvous returns only once the line was written."""

from __future__ import annotations

import sys
import threading
import types

from launcher.task.torchrun_jsc import phases


class Lines:
    """A stream that records lines and sets an event at the first."""

    def __init__(self) -> None:
        self.lines, self.seen = [], threading.Event()

    def write(self, text: str) -> None:
        self.lines.append(text)
        self.seen.set()

    def flush(self) -> None:
        pass


def agent_api(rendezvous):
    api = types.ModuleType("api")
    api.SimpleElasticAgent = type("SimpleElasticAgent", (), {"_rendezvous": rendezvous})
    return api


def with_hook(monkeypatch, tmp_path):
    marks = []
    hook = types.ModuleType(phases.HOOK_MODULE)
    hook.phase = marks.append
    monkeypatch.setitem(sys.modules, phases.HOOK_MODULE, hook)
    monkeypatch.setenv(phases.TIMELINE_ENV, str(tmp_path))
    monkeypatch.setenv("SLURM_JOB_ID", "4711")
    return marks


def test_a_long_rendezvous_says_so_and_is_marked_when_done(monkeypatch, tmp_path):
    marks, out = with_hook(monkeypatch, tmp_path), Lines()

    def slow(self, *args):  # the others come only after this node said it waits
        assert out.seen.wait(30), "no waiting line"
        return "met"

    api = agent_api(slow)
    assert phases.mark_rendezvous(api, "jwb0001i:29500", out, first=0.05, every=60)
    assert api.SimpleElasticAgent()._rendezvous() == "met"
    assert marks == ["rendezvous_done"]
    [line] = out.lines
    assert line.startswith("torchrun_jsc: rendezvous at jwb0001i:29500 not done after "), line
    assert line.endswith(" s: waiting for the other nodes' agents (`jsc-compose timeline 4711` "
                         "shows which nodes got to \"torchrun_jsc decided\" and which did "
                         "not)\n"), line


def test_a_rendezvous_in_time_says_nothing(monkeypatch, tmp_path):
    marks, out = with_hook(monkeypatch, tmp_path), Lines()
    api = agent_api(lambda self: "met")
    assert phases.mark_rendezvous(api, "jwb0001i:29500", out, first=30, every=60)
    assert api.SimpleElasticAgent()._rendezvous() == "met"
    assert marks == ["rendezvous_done"] and out.lines == []


def test_the_lines_repeat_until_done():
    out, calls = Lines(), []

    class Done:  # done after the third line; wait() returns at once (no real time passes)
        def wait(self, seconds):
            calls.append(seconds)
            return len(out.lines) >= 3

    phases.waiting_lines("h:1", Done(), out, first=60, every=300, clock=lambda: 0.0)
    assert calls == [60, 300, 300, 300] and len(out.lines) == 3


def test_no_timeline_no_wrapper(monkeypatch):
    monkeypatch.delenv(phases.TIMELINE_ENV, raising=False)
    assert not phases.mark_rendezvous(agent_api(lambda self: None), "h:1")
