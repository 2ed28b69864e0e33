"""Issue 36 item 6, issue 43: a rendezvous that takes long is not a silent wait, and not a
line per node either. torchrun_jsc's wrapper of torch's SimpleElasticAgent._rendezvous
(launcher/task/torchrun_jsc/phases.py) on the store host only says once, after WAIT_FIRST_S,
that the rendezvous still waits at the endpoint, how many nodes' agents got to it (their
"decided" marks on the timeline) and where to see which; the other nodes, a rendezvous done
in time and a later rendezvous after a line say nothing. Synchronised by events, not sleeps:
the stand-in rendezvous returns only once the line was written."""

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


def test_a_long_rendezvous_says_so_once_and_is_marked_when_done(monkeypatch, tmp_path):
    marks, out = with_hook(monkeypatch, tmp_path), Lines()

    def slow(self, *args):  # the others come only after this node said it waits
        assert out.seen.wait(30), "no waiting line"
        return "met"

    api = agent_api(slow)
    assert phases.mark_rendezvous(api, "jwb0001i:29500", out, first=0.05, nnodes="4",
                                  seen=lambda: 3)
    assert api.SimpleElasticAgent()._rendezvous() == "met"
    assert marks == ["rendezvous_done"]
    [line] = out.lines
    assert line.startswith("torchrun_jsc: rendezvous at jwb0001i:29500 not done after "), line
    assert line.endswith(" s: 3 of 4 nodes' agents got to it (`jsc-compose timeline 4711` "
                         "shows which nodes got to \"torchrun_jsc decided\" and which did "
                         "not)\n"), line
    # A later rendezvous (a restart after a lost node) waits without a second line.
    slow_again = api.SimpleElasticAgent()
    assert slow_again._rendezvous() == "met" and len(out.lines) == 1


def test_only_the_store_host_says_it(monkeypatch, tmp_path):
    marks, out = with_hook(monkeypatch, tmp_path), Lines()
    started = []

    def slow(self, *args):
        started.append(1)
        return "met"

    api = agent_api(slow)
    assert phases.mark_rendezvous(api, "h:1", out, first=0.0, is_host=False, nnodes="2")
    assert api.SimpleElasticAgent()._rendezvous() == "met"
    assert marks == ["rendezvous_done"] and out.lines == [] and started == [1]
    assert not any(t.name == "torchrun_jsc-rdzv-wait" for t in threading.enumerate())


def test_a_rendezvous_in_time_says_nothing(monkeypatch, tmp_path):
    marks, out = with_hook(monkeypatch, tmp_path), Lines()
    api = agent_api(lambda self: "met")
    assert phases.mark_rendezvous(api, "jwb0001i:29500", out, first=30)
    assert api.SimpleElasticAgent()._rendezvous() == "met"
    assert marks == ["rendezvous_done"] and out.lines == []


def test_the_line_is_said_once_and_counts_the_agents_from_the_timeline(tmp_path, monkeypatch):
    for node, text in (("jwb0001", "1 batch_start\n2 decided\n"), ("jwb0002", "2 decided\n"),
                       ("jwb0003", "1 container_up pid=3\n")):
        (tmp_path / node).write_text(text)
    monkeypatch.setenv(phases.TIMELINE_ENV, str(tmp_path))
    out = Lines()

    class Never:  # never done; wait() returns at once (no real time passes)
        calls = []

        def wait(self, seconds):
            self.calls.append(seconds)
            return False

    assert phases.waiting_line("h:1", Never(), out, "3", first=60, clock=lambda: 0.0)
    assert Never.calls == [60] and len(out.lines) == 1
    assert " 2 of 3 nodes' agents got to it " in out.lines[0]
    assert phases.agents_seen(str(tmp_path / "missing")) == 0


def test_no_timeline_no_wrapper(monkeypatch):
    monkeypatch.delenv(phases.TIMELINE_ENV, raising=False)
    assert not phases.mark_rendezvous(agent_api(lambda self: None), "h:1")
