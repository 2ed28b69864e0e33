"""Ring 1: launch.hang_action replace (issue 37 item 3): the key's rules, the script's lines,
which nodes the deadline names and when they can be replaced (launcher/node/spares.py
hang_refusal), the watcher that asks instead of ending the job and starts its deadline again
after a replacement (launcher/node/stacks.py watch). The supervisor doing it with a stand-in
srun: tests/fakes/test_spares.py; a real hang on the lab: tests/lab/test_hung_node.py.
"""

from __future__ import annotations

import time

import pytest

from launcher.model import SpecError
from launcher.node import slurmstate, spares, stacks
from launcher.render.jobscript import render_jobscript
from tests.unit.test_hang_deadline import Clock, put, slot_line
from tests.unit.test_spare_nodes import spec as spare_spec

def spec(spare=1, mode="torchrun", launch=", hang_timeout: 130, hang_action: replace"):
    """tests/unit/test_spare_nodes.py's job, with a time limit above every deadline here."""
    return spare_spec(spare=spare, mode=mode, launch=launch, time="00:30:00")


def refusal(**kw) -> str:
    with pytest.raises(SpecError) as e:
        spec(**kw)
    assert "\n" not in str(e.value), str(e.value)
    return str(e.value)


def test_replace_is_opt_in_and_the_supervisor_runs_the_watcher():
    assert spec(launch=", hang_timeout: 700").launch.hang_action == "end"
    text = render_jobscript(spec())
    assert "\njsc_watch 130 13 30 replace  # launch.hang_action: the spares' supervisor " \
        "runs it\n" in text, text
    # without it: the watcher of its own, as before
    plain = render_jobscript(spec(launch=", hang_timeout: 700"))
    assert "\njsc_watch 700 60 30\n" in plain and "replace" not in plain


@pytest.mark.parametrize("kw, message", [
    (dict(spare=0), "launch.hang_action: needs job.spare_nodes >= 1 (a spare to take the hung "
                    "node's place) and launch.mode torchrun; without spares the deadline can "
                    "only end the job (hang_action end), got 'replace'"),
    (dict(spare=0, mode="srun"), "launch.hang_action: needs job.spare_nodes >= 1"),
    (dict(mode="srun"), "job.spare_nodes: mode srun has no per-node agent"),
    (dict(launch=", hang_action: replace"),
     "launch.hang_action: needs launch.hang_timeout: the deadline is what finds the node "
     "behind, got 'replace'"),
    (dict(launch=", hang_timeout: 130, hang_action: kill"),
     "launch.hang_action: must be one of end, replace, got 'kill'"),
    # the spares' own max_restarts counts without replace (the watcher cannot know of the
    # agents' restarts), and a user's own with it
    (dict(launch=", hang_timeout: 130"), "must be more than the rendezvous join timeout"),
    (dict(launch=", hang_timeout: 130, hang_action: replace, max_restarts: 1"),
     "must be more than the rendezvous join timeout"),
])
def test_bad_specs_are_one_line(kw, message):
    assert message in refusal(**kw)


def test_which_hung_nodes_can_be_replaced():
    train = ["jwb0001", "jwb0002", "jwb0003"]
    assert spares.hang_refusal(["jwb0002"], train, 1) is None
    assert spares.hang_refusal(["jwb0002", "jwb0003"], train, 2) is None
    assert spares.hang_refusal([], train, 1) == (
        "the deadline names no node behind the others (every running rank issued as many "
        "collectives: they wait in one together)")
    assert spares.hang_refusal(["jwb0001", "jwb0003"], train, 2) == (
        "node jwb0001 is behind, and it is the batch host (the job's script and rendezvous "
        "store): it cannot be replaced")
    assert spares.hang_refusal(["jwb0002", "jwb0003"], train, 1) == (
        "2 nodes are behind (jwb0002, jwb0003), 1 spare left")
    assert spares.hang_refusal(["jwb0002"], train, 0) == "1 node is behind (jwb0002), 0 spares left"
    assert spares.hang_refusal(["jwb0009"], train, 1) == "node jwb0009 is behind but trains no more"


def test_the_hung_nodes_step_is_found_by_its_node():
    lines = ["42.batch jwb0001", "42.extern jwb[0001-0003]", "42.0 jwb0001", "42.1 jwb0002",
             "42.4 jwb[0001-0003]", "43.1 jwb0002", "42.5 jwb0002"]
    assert slurmstate.node_steps("42", "jwb0002", lines) == ["42.1", "42.5"]
    assert slurmstate.node_steps("42", "jwb0003", lines) == []


def test_the_nodes_behind_from_the_mark_files(tmp_path):
    folder = tmp_path / "progress"
    folder.mkdir()
    for rank, node, world in ((0, "jwb0001", 7), (1, "jwb0001", 7), (2, "jwb0002", 7),
                              (3, "jwb0002", 6)):
        put(folder, node, rank % 2, slot_line(rank, world, 1000.0 + rank))
    put(folder, "jwb0003", 1, slot_line(3, 0, 900.0))  # an older attempt's: not counted
    slots = stacks.read_slots(str(tmp_path))
    marks = stacks.marks_of(slots, since=950.0)
    assert stacks.behind(marks) == [3]
    assert stacks.rank_nodes(slots, since=950.0) == {0: "jwb0001", 1: "jwb0001",
                                                     2: "jwb0002", 3: "jwb0002"}
    # the newest mark names the node: rank 3 now on the spare
    put(folder, "jwb0003", 1, slot_line(3, 0, 1100.0))
    assert stacks.rank_nodes(stacks.read_slots(str(tmp_path)))[3] == "jwb0003"
    even = {r: dict(m, world=7) for r, m in marks.items()}
    assert stacks.behind(even) == []


def test_watch_asks_the_supervisor_then_starts_its_deadline_again(tmp_path, monkeypatch,
                                                                 capsys):
    """Rank 3 (jwb0002) stays one collective behind: after the stacks the watcher asks to
    replace jwb0002 and goes on. The old marks no longer count; the new round's start-up
    (ranks at 0 collectives) does not either; then all four wait together: nobody is behind,
    the supervisor says why not, and the job ends as without replace."""
    folder = tmp_path / "progress"
    folder.mkdir()
    clock = Clock(1.7e9)
    calls = []
    monkeypatch.setattr(stacks.subprocess, "call",
                        lambda argv, timeout: calls.append(argv) or 0)
    monkeypatch.setattr(stacks, "list_steps", lambda job: [f"{job}.0"])
    for rank in range(4):
        put(folder, f"jwb000{1 + rank // 2}", rank % 2, slot_line(rank, 2 if rank < 3 else 1,
                                                                  clock.now + 1))
    asked = []

    def on_hang(nodes, idle, text):
        asked.append((nodes, idle, text, clock.now))
        if len(asked) == 1:  # replaced: the new round's ranks start (rank 2, 3 on the spare)
            for rank in range(4):
                node = "jwb0001" if rank < 2 else "jwb0003"
                put(folder, node, rank % 2, slot_line(rank, 0, clock.now))
            return None
        return "the deadline names no node behind the others"

    real_sleep, looks = clock.sleep, []

    def sleep(s):
        real_sleep(s)
        looks.append(clock.now)
        if len(asked) == 1 and len(looks) == 30:  # the new round's first collective, long
            for rank in range(4):                 # after the deadline would have passed
                node = "jwb0001" if rank < 2 else "jwb0003"
                put(folder, node, rank % 2, slot_line(rank, 1, clock.now))

    start = clock.now
    assert stacks.watch("77", str(tmp_path), 30, 5, 30, [sys_exe(), "-c", ""], clock=clock.time,
                        sleep=sleep, on_hang=on_hang) == 0
    out = capsys.readouterr().out
    (first, idle1, text1, at1), (second, idle2, text2, at2) = asked
    # the last progress at start + 1, the looks every 5 s: found at start + 35
    assert first == ["jwb0002"] and idle1 == 34 and at1 == start + 35, asked
    assert text1 == ("no progress for 30 s: rank 3 on ?: no stack (process state ?), "
                     "1 collective behind the other 3")
    assert f"job 77: {text1}\n" in out, out
    assert second == [] and at2 == looks[29] + 30, (asked, looks)
    assert out.endswith("job 77: launch.hang_action replace: the deadline names no node "
                        "behind the others: the job ends\n"), out
    assert (tmp_path / "no-progress").read_text() == (
        "no progress for 30 s: no rank answered the stack request; job ended\n")
    assert calls == [["scancel", "--signal=TERM", "77"], ["scancel", "--signal=KILL", "77.0"]]


def test_watch_starts_again_from_a_replacement_it_did_not_ask_for(tmp_path, monkeypatch,
                                                                 capsys):
    """A node lost by heartbeat is replaced by the supervisor alone: ``since`` moves the
    deadline's start there, so the marks of the round before (still, as their ranks are
    being restarted) do not end the job."""
    folder = tmp_path / "progress"
    folder.mkdir()
    clock = Clock(1.7e9)
    monkeypatch.setattr(stacks.subprocess, "call", lambda argv, timeout: 0)
    monkeypatch.setattr(stacks, "list_steps", lambda job: [])
    for rank in range(2):
        put(folder, "jwb0001", rank, slot_line(rank, 3, clock.now + 1))
    replaced = [None]
    real_sleep = clock.sleep

    def sleep(s):
        real_sleep(s)
        if clock.now >= 1.7e9 + 20 and replaced[0] is None:
            replaced[0] = clock.now
        if clock.now >= 1.7e9 + 100:  # the new round's ranks, after their start-up
            for rank in range(2):
                put(folder, "jwb0001", rank, slot_line(rank, 4, 1.7e9 + 100))

    stacks.watch("78", str(tmp_path), 30, 5, 1, [sys_exe(), "-c", ""], clock=clock.time,
                 sleep=sleep, since=lambda: replaced[0])
    out = capsys.readouterr().out
    assert f"\njob 78: no progress for 30 s (launch.hang_timeout 30) at " \
        f"{stacks.time_text(1.7e9 + 130)}: " in out, out


def sys_exe() -> str:
    import sys
    return sys.executable


def test_a_replacement_restarts_the_deadline_on_the_marks_clock(monkeypatch, capsys):
    """The supervisor's clock is monotonic (heartbeats), the ranks' progress marks are stamped
    with the epoch: the deadline's new start (``since``) must be on the marks' clock, or the
    watcher would never see the replacement. Slurm and srun stand in by monkeypatch."""
    monkeypatch.setattr(spares.slurmstate, "call", lambda argv, timeout: (0, ""))
    monkeypatch.setattr(spares.Supervisor, "start",
                        lambda self, slot, node: setattr(slot, "node", node))
    sup = spares.Supervisor("42", 10, ["n1", "n2"], ["n3"], ["srun"])
    before = time.time()
    assert sup.hung(["n2"], 130) is None
    assert before <= sup.replaced_at <= time.time()
    assert [s.node for s in sup.slots] == ["n1", "n3"]
    for thread in sup.enders:
        thread.join(5)
    assert "replaced by spare n3 (node rank 1; 0 spares left)" in capsys.readouterr().out
