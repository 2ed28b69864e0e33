"""Issue 21, the progress deadline (launch.hang_timeout): the spec key, the jobscript lines,
the hook's progress marks, the watcher's decision and its one line.

Ring 1: pure (fake marks, an injected clock and sleep, no waiting). The rendered script under
the recording fakes and the hook in real processes: tests/fakes/test_hang_deadline.py; real
Slurm: tests/lab/test_hangs.py.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest

from launcher.features import hangs as hangs_feature
from launcher.node import stacks
from launcher.render.jobscript import render_jobscript
from launcher.model import SpecError
from launcher.spec import load_spec, parse_spec
from tests.unit.test_hangs import C10D, DATA, LOGGER, TRAIN, record

REPO = Path(__file__).resolve().parents[2]

BASE = "job: {nodes: 4, time: '1:00:00'}\nsite: jsc\nprogram: [python3, t.py]\n"


def spec_with(launch: str, base: str = BASE):
    return parse_spec(base + f"launch: {launch}\n", "h.yaml")


def refusal(launch: str, base: str = BASE) -> str:
    with pytest.raises(SpecError) as info:
        spec_with(launch, base)
    return str(info.value)

# --- spec ------------------------------------------------------------------------------------


def test_seconds_or_slurm_time():
    assert spec_with("{hang_timeout: 600}").launch.hang_timeout == 600
    assert spec_with("{hang_timeout: '30:00'}").launch.hang_timeout == 1800
    assert spec_with("{hang_timeout: false}").launch.hang_timeout is None
    assert spec_with("{mode: srun}").launch.hang_timeout is None


@pytest.mark.parametrize("value", ["-5", "0", "abc", "true", "1.5", "[600]"])
def test_bad_values_one_line(value):
    text = refusal(f"{{hang_timeout: {value}}}")
    assert text.startswith("h.yaml: launch.hang_timeout: must be seconds (e.g. 1800) or a "
                           "Slurm time such as 30:00, got "), text
    assert "\n" not in text


def test_too_small_for_the_rendezvous_or_too_big_for_the_time_limit():
    assert refusal("{hang_timeout: 60}") == (
        "h.yaml: launch.hang_timeout: must be at least the rendezvous store's read timeout "
        "(122 s for 4 nodes: 120 + 1 per 2 nodes), which the kit allows one wait on the "
        "store, got 60")
    assert spec_with("{hang_timeout: 122}").launch.hang_timeout == 122
    assert refusal("{hang_timeout: 604, max_restarts: 1}") == (
        "h.yaml: launch.hang_timeout: must be more than the rendezvous join timeout (604 s "
        "for 4 nodes) with launch.max_restarts: after a restart the agents meet again that "
        "long while no rank runs, got 604")
    assert spec_with("{hang_timeout: 605, max_restarts: 1}").launch.hang_timeout == 605
    assert refusal("{hang_timeout: 3600}") == (
        "h.yaml: launch.hang_timeout: must be less than job.time (1:00:00 = 3600 s), or the "
        "time limit comes first, got 3600")


@pytest.mark.parametrize("mode, why", [
    ("horovod", "horovod's collectives are not torch.distributed's"),
    ("ray", "Ray's workers are not ranks the kit's hook can watch"),
])
def test_not_in_modes_without_torch_distributed(mode, why):
    assert refusal(f"{{mode: {mode}, hang_timeout: 600}}") == (
        f"h.yaml: launch.hang_timeout: means nothing in mode '{mode}': progress is observed "
        f"through torch.distributed's collectives, and {why}, got 600")


def test_modes_say_whether_the_hook_sees_progress():
    """The refusal comes from the mode (no_progress_hook), not from a list of names."""
    from launcher.modes import MODES
    refused = {name for name, mode in MODES.items() if mode.no_progress_hook}
    assert refused == {"horovod", "ray"}


def test_cli_check_prints_the_line(tmp_path, capsys):
    from launcher import cli

    path = tmp_path / "bad.yaml"
    path.write_text(BASE + "launch: {hang_timeout: -1}\n")
    assert cli.main(["render", str(path)]) != 0
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1].endswith(
        "launch.hang_timeout: must be seconds (e.g. 1800) or a Slurm time such as 30:00, got -1")
    assert "Traceback" not in err

# --- jobscript -------------------------------------------------------------------------------


JOB_SH = REPO / "launcher" / "node" / "job.sh"


def function_body(name: str) -> str:
    """A function of launcher/node/job.sh, its continuation lines joined."""
    text = JOB_SH.read_text(encoding="utf-8")
    body = text[text.index(f"\n{name}() {{") + 1:]
    return body[:body.index("\n}\n")].replace("\\\n", " ")


def test_one_time_format_in_every_log_line():
    """Times in the kit's log lines are human (the node's local time with its zone), the same
    in the batch script (job.sh jsc_now) and the watcher (stacks.time_text); no line prints
    a raw epoch (date +%s)."""
    assert function_body("jsc_now").split("\n")[1:] == [f'    date "+{stacks.TIME_FORMAT}"']
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \S+", stacks.time_text(1795791228.42))
    text = JOB_SH.read_text(encoding="utf-8")
    assert [line for line in text.splitlines() if "echo" in line and "date" in line] == []
    assert text.count("$(jsc_now)") == 3  # the stacks' signal, the requeue signal, the requeue


def test_watcher_only_when_the_spec_asks():
    plain = render_jobscript(spec_with("{mode: torchrun}"))
    for text in ("jsc_watch", "jsc_deadline_setup", " watch ", "/progress", "no-progress"):
        assert text not in plain, text
    hang = render_jobscript(spec_with("{mode: torchrun, hang_timeout: 600}"))
    lines = hang.splitlines()
    command = [line.split("  # ")[0] for line in lines]  # without a line's trailing comment
    assert "jsc_deadline_setup 60  # launch.hang_timeout 600 s: progress noted every 60 s" \
        in lines
    setup, deadline = command.index("jsc_hangs_setup RANK"), lines.index(
        "jsc_deadline_setup 60  # launch.hang_timeout 600 s: progress noted every 60 s")
    watch = lines.index("jsc_watch 600 60 30")  # TIMEOUT PERIOD KILL_AFTER
    launch = next(i for i, line in enumerate(lines) if line.startswith("srun --kill-on-bad"))
    assert setup < deadline < watch == launch - 1
    assert lines[-2:] == ["jsc_wait_launch", 'exit "$launch_rc"']
    assert function_body("jsc_wait_launch").rstrip().endswith("done\n    jsc_after_launch")
    # What those do: the kit's functions (launcher/node/job.sh).
    assert function_body("jsc_deadline_setup").split("\n")[1:] == [
        '    mkdir -p -- "$hangs_dir/progress"',
        "    printf '%s\\n' \"$1\" >\"$hangs_dir/progress/period\"",
        f'    rm -f -- "$hangs_dir/{stacks.VERDICT}"']
    watcher = function_body("jsc_watch")
    flat = " ".join(watcher.split())
    # (with `replace`, launch.hang_action, the spares' supervisor runs it instead:
    # tests/unit/test_hang_replace.py, tests/fakes/test_spares.py)
    assert flat.index("jsc_collector") < flat.index(
        'fi python3 -I "$kit/node/run.py" stacks watch "${SLURM_JOB_ID}" '
        '"$hangs_dir" "$1" "$2" "$3" -- "${collector[@]}" &'), flat
    assert watcher.rstrip().endswith("&\n    jsc_watch_pid=$!")
    after = function_body("jsc_after_launch")
    assert after.index('kill "$jsc_watch_pid"') < after.index(
        f'cat -- "$hangs_dir/{stacks.VERDICT}" >&2') < after.index(
        f"exit {hangs_feature.EXIT_NO_PROGRESS}")
    # Without the watcher (no jsc_watch call) nothing is killed or read.
    assert after.index('if [ -n "${jsc_watch_pid:-}" ]; then') < after.index('kill "$jsc_watch')


def test_watcher_with_requeue_before_its_verdict():
    base = ("job: {nodes: 2, time: '1:00:00', requeue: true}\nsite: jsc\n"
            "program: [python3, t.py]\n")
    lines = render_jobscript(spec_with("{hang_timeout: 300}", base)).splitlines()
    assert lines[-2:] == ["jsc_wait_launch", "jsc_requeue_verdict USR2 3"]
    assert lines.index("jsc_watch 300 30 30") < lines.index("jsc_wait_launch")


def test_existing_jobs_have_no_watcher():
    for spec in sorted((REPO / "jobs").glob("*.yaml")):
        try:
            text = render_jobscript(load_spec(str(spec.relative_to(REPO))))
        except SpecError:
            continue  # not a jsc-compose spec (submitit)
        assert "jsc_watch" not in text and "jsc_deadline_setup" not in text, spec


def test_period_is_a_tenth_within_1_to_60():
    assert [hangs_feature.progress_period(t) for t in (5, 122, 600, 1800, 86400)] == \
        [1, 12, 60, 60, 60]

# --- the watcher's decision (pure) -----------------------------------------------------------


def mark(t, world=5, done=False, calls=0):
    return {"world": world, "all": world, "calls": calls, "t": t, "done": done}


def test_overdue_only_when_every_rank_is_still_for_the_timeout():
    marks = {0: mark(1000.0), 1: mark(1090.0), 2: mark(1010.0)}
    assert stacks.overdue(marks, 1100.0, 20) is None  # rank 1 moved 10 s ago
    assert stacks.overdue(marks, 1110.0, 20) == 20.0
    assert stacks.overdue({}, 1e9, 20) is None  # no rank yet: still starting
    finished = {r: mark(0.0, done=True) for r in range(3)}
    assert stacks.overdue(finished, 1e9, 20) is None  # all finished: the launch is ending
    finished[3] = mark(0.0)
    assert stacks.overdue(finished, 100.0, 20) == 100.0


def test_the_clock_starts_at_every_ranks_first_collective():
    """Issue 26: imports, model, checkpoint, compilation before the first collective never
    count; a rank still starting (no collective, no progress() call) holds the clock."""
    marks = {0: mark(1000.0, world=0), 1: mark(1000.0, world=3), 2: mark(1000.0, world=0,
                                                                          calls=1)}
    assert stacks.overdue(marks, 5000.0, 20) is None  # rank 0 has not issued one yet
    marks[0] = mark(1010.0, world=1)
    assert stacks.overdue(marks, 5000.0, 20) == 3990.0
    unread = {**marks, 3: {"world": None, "all": None, "calls": None, "t": 1.0, "done": False}}
    assert stacks.overdue(unread, 5000.0, 20) is None  # a mark not read says nothing yet
    assert stacks.overdue({0: mark(1.0, world=0, done=True), 1: mark(1.0, world=2)},
                          100.0, 20) == 99.0  # a finished rank has started


def test_only_the_jobs_own_steps_are_killed():
    listed = ["77.batch", "77.extern", "77.0", "77.1", "770.2", "77.interactive", ""]
    assert stacks.job_steps("77", listed) == ["77.0", "77.1"]


def slot_line(rank, world, t, state="run", all_=None, calls=0):
    """A mark as the hook writes it into its slot (launcher/task/hook/sitecustomize.py _mark)."""
    line = (f"rank={rank} world={world} all={world if all_ is None else all_} calls={calls} "
            f"t={t:.3f} state={state}")
    return (line.ljust(stacks.MARK_WIDTH - 1) + "\n").encode()


def put(folder, node, slot, data: bytes):
    """``data`` at ``slot`` of ``node``'s mark file (progress/marks.NODE), in place."""
    path = folder / f"{stacks.MARKS_PREFIX}{node}"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, data, slot * stacks.MARK_WIDTH)
    finally:
        os.close(fd)


def test_marks_from_one_file_per_node(tmp_path):
    """Issue 36: O(nodes) files, each rank's line in place at its slot (its local rank)."""
    folder = tmp_path / "progress"
    folder.mkdir()
    (folder / "period").write_text("1\n")
    (folder / "watcher").write_text("t=1.000\n")  # the watcher's own probe: not a mark
    put(folder, "jwb0001", 0, slot_line(0, 3, 1500.25, all_=7, calls=2))
    put(folder, "jwb0001", 1, slot_line(1, 2, 1400.0, "done", all_=6))
    put(folder, "jwb0002", 0, slot_line(2, 1, 10.0))
    put(folder, "jwb0002", 2, slot_line(7, 4, 1450.0)[:40])  # caught while rewritten
    marks = stacks.read_marks(str(tmp_path), since=1000.0)
    assert marks[0] == {"world": 3, "all": 7, "calls": 2, "t": 1500.25, "done": False}
    assert marks[1]["done"] is True
    assert 2 not in marks  # older than the watcher: an earlier attempt of a requeued job
    # A torn slot is no time at all (no mtime stands in): a rank not started, for this look.
    assert marks["marks.jwb0002:2"] == {"world": None, "all": None, "calls": None,
                                        "t": 1000.0, "done": False}
    assert sorted(k for k in marks if isinstance(k, int)) == [0, 1]
    assert sorted(p.name for p in folder.iterdir()) == [
        "marks.jwb0001", "marks.jwb0002", "period", "watcher"]


def stuck_records():
    records = [record(r, "jwb0001" if r < 2 else "jwb0002", [C10D, LOGGER, TRAIN])
               for r in range(3)]
    return records + [record(3, "jwb0002", [DATA, TRAIN])]


def test_verdict_names_the_rank_behind():
    marks = {r: mark(1000.0, world=2) for r in range(3)}
    marks[3] = mark(990.0, world=1)
    assert stacks.verdict(stuck_records(), marks, 300) == (
        "no progress for 300 s: rank 3 on jwb0002 in load_batch at data.py:17, "
        "1 collective behind the other 3; job ended")


def test_verdict_behind_even_when_the_stacks_do_not_tell():
    # 2 ranks, 2 stacks: the stacks alone cannot say which one is the odd one out.
    records = [record(0, "a", [C10D, LOGGER, TRAIN]), record(1, "b", [DATA, TRAIN])]
    marks = {0: mark(1.0, world=4), 1: mark(1.0, world=1)}
    assert stacks.verdict(records, marks, 120) == (
        "no progress for 120 s: rank 1 on b in load_batch at data.py:17, 3 collectives behind "
        "the other 1; job ended")
    marks = {0: mark(1.0, world=1), 1: mark(1.0, world=4)}
    assert "rank 0 on a in all_reduce at train.py:42, 3 collectives behind" in \
        stacks.verdict(records, marks, 120)


def test_verdict_without_a_rank_behind():
    even = {r: mark(1.0, world=2) for r in range(4)}
    assert stacks.verdict(stuck_records(), even, 300) == (
        "no progress for 300 s: rank 3 on jwb0002 in load_batch at data.py:17; job ended")
    same = [record(r, "jwb0001", [C10D, LOGGER, TRAIN]) for r in range(4)]
    assert stacks.verdict(same, even, 300) == (
        "no progress for 300 s: all 4 ranks in all_reduce at train.py:42; job ended")
    assert stacks.verdict([], even, 300) == (
        "no progress for 300 s: no rank answered the stack request; job ended")
    # A rank behind that does not answer (blocked in the kernel) is still named.
    marks = dict(even)
    marks[3] = mark(1.0, world=1)
    assert stacks.verdict(stuck_records()[:3], marks, 300).startswith(
        "no progress for 300 s: rank 3 on ?: no stack (process state ?), 1 collective behind")


def write_mark(folder, rank, world, t):
    """A running rank's mark as the hook writes it: WORLD collectives (all groups the same),
    at its slot of its node's file (2 ranks per node)."""
    put(folder, f"jwb{rank // 2}", rank % 2, slot_line(rank, world, t))


class Clock:
    """Time that passes only when the watcher sleeps."""

    def __init__(self, now: float) -> None:
        self.now, self.sleeps = now, []

    def time(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.now += s


def test_watch_waits_for_the_deadline_then_reports_and_ends(tmp_path, monkeypatch, capsys):
    folder = tmp_path / "progress"
    folder.mkdir()
    clock = Clock(1.7e9)  # whole seconds: the marks keep 3 decimals
    calls = []
    monkeypatch.setattr(stacks.subprocess, "call",
                        lambda argv, timeout: calls.append(argv) or 0)
    monkeypatch.setattr(stacks, "list_steps", lambda job: [f"{job}.0", f"{job}.1"])

    for rank in range(4):
        write_mark(folder, rank, 1, clock.now + 1)
    real_sleep = clock.sleep

    def sleep(s):  # ranks 0-2 enter the next collective after the watcher's 3rd look
        real_sleep(s)
        if len(clock.sleeps) == 3:
            for rank in range(3):
                write_mark(folder, rank, 2, clock.now)

    lines = "\n".join(json.dumps(r) for r in stuck_records())
    collector = [sys.executable, "-c", f"print({lines!r})"]
    start = clock.now
    assert stacks.watch("77", str(tmp_path), 30, 5, 30, collector, clock=clock.time,
                        sleep=sleep) == 0
    out = capsys.readouterr().out
    # The last progress was at the 3rd look (start + 15): the deadline passed at start + 45.
    assert clock.sleeps[:9] == [5] * 9 and clock.sleeps[9] == 30
    assert out.startswith(f"job 77: no progress for 30 s (launch.hang_timeout 30) at "
                          f"{stacks.time_text(start + 45)}: every rank's stack"), out
    assert "\nstacks: 3 ranks in all_reduce at train.py:42; rank 3 on jwb0002 in load_batch " \
        "at data.py:17\n" in out
    assert (tmp_path / "no-progress").read_text() == (
        "no progress for 30 s: rank 3 on jwb0002 in load_batch at data.py:17, 1 collective "
        "behind the other 3; job ended\n")
    # SIGKILL to the job id would cancel the job: to its steps, by step id (issue 26)
    assert calls == [["scancel", "--signal=TERM", "77"],
                     ["scancel", "--signal=KILL", "77.0", "77.1"]]


def test_watch_notes_once_when_no_rank_reports(tmp_path, monkeypatch, capsys):
    (tmp_path / "progress").mkdir()
    clock = Clock(5000.0)

    first = []

    def sleep(s):
        clock.sleep(s)
        if len(clock.sleeps) == 8:  # a rank at last (an image that took long to start)
            write_mark(tmp_path / "progress", 0, 0, clock.now)
        if len(clock.sleeps) == 12:  # its first collective: the clock starts
            first.append(clock.now)
            write_mark(tmp_path / "progress", 0, 1, clock.now)
    monkeypatch.setattr(stacks.subprocess, "call", lambda argv, timeout: 0)
    monkeypatch.setattr(stacks, "list_steps", lambda job: [])
    stacks.watch("78", str(tmp_path), 10, 2, 7, [sys.executable, "-c", ""], clock=clock.time,
                 sleep=sleep)
    out = capsys.readouterr().out
    assert out.count("launch.hang_timeout: no rank has reported after 10 s") == 1
    assert "issued no collective" not in out  # one note only
    assert clock.now == first[0] + 10 + 7
    assert (tmp_path / "no-progress").read_text() == (
        "no progress for 10 s: no rank answered the stack request; job ended\n")


def test_watch_names_the_ranks_still_starting_once(tmp_path, monkeypatch, capsys):
    """A rank that never reaches its first collective holds the clock (torch's collective
    timeout ends such a job); the watcher says which, once."""
    (tmp_path / "progress").mkdir()
    clock = Clock(7000.0)
    for rank, world in ((0, 2), (1, 0), (2, 2), (3, 0)):
        write_mark(tmp_path / "progress", rank, world, clock.now + 1)

    def sleep(s):
        clock.sleep(s)
        if len(clock.sleeps) == 20:
            for rank in (1, 3):
                write_mark(tmp_path / "progress", rank, 1, clock.now)
    monkeypatch.setattr(stacks.subprocess, "call", lambda argv, timeout: 0)
    monkeypatch.setattr(stacks, "list_steps", lambda job: [])
    stacks.watch("79", str(tmp_path), 10, 2, 1, [sys.executable, "-c", ""], clock=clock.time,
                 sleep=sleep)
    out = capsys.readouterr().out
    assert out.count("job 79: launch.hang_timeout: ranks 1,3 issued no collective after 10 s; "
                     "the deadline starts once every rank has") == 1, out
    assert clock.now == 7000.0 + 20 * 2 + 10 + 1
    assert "1 collective behind the other 2" in (tmp_path / "no-progress").read_text()


def test_watch_keeps_the_stacks_read_before_the_collection_timed_out(tmp_path, monkeypatch,
                                                                      capsys):
    """A node that never answers: the ranks the other nodes sent are still reported."""
    folder = tmp_path / "progress"
    folder.mkdir()
    for rank, world in ((0, 2), (1, 2), (2, 2), (3, 1)):
        write_mark(folder, rank, world, 1001.0)
    monkeypatch.setattr(stacks.subprocess, "call", lambda argv, timeout: 0)
    monkeypatch.setattr(stacks, "list_steps", lambda job: [])
    monkeypatch.setattr(stacks, "COLLECT_S", 2)
    lines = "\n".join(json.dumps(r) for r in stuck_records())
    collector = [sys.executable, "-c",
                 f"import sys, time; print({lines!r}, flush=True); time.sleep(60)"]
    clock = Clock(1000.0)
    stacks.watch("80", str(tmp_path), 30, 5, 1, collector, clock=clock.time, sleep=clock.sleep)
    out = capsys.readouterr().out
    assert "stacks: 3 ranks in all_reduce at train.py:42; rank 3 on jwb0002 in load_batch" in out
    assert (tmp_path / "no-progress").read_text().startswith(
        "no progress for 30 s: rank 3 on jwb0002 in load_batch at data.py:17")


def test_a_stall_of_the_storage_is_not_no_progress(tmp_path, monkeypatch, capsys):
    """Issue 36: storage that holds writes up (the ranks' marks and the watcher's own probe)
    for longer than the deadline: the marks that land afterwards carry the times the ranks
    stamped, so their age says nothing; the watcher sees its look come late, says so, and
    counts from the stall's end. A real hang afterwards still ends the job, a deadline after
    the last progress."""
    folder = tmp_path / "progress"
    folder.mkdir()
    clock = Clock(2.0e9)
    looks = []

    def probe(directory, now):  # the watcher's own write: held 100 s at the 4th look
        looks.append(now)
        if len(looks) == 4:
            clock.now += 100
    monkeypatch.setattr(stacks, "_probe", probe)

    def sleep(s):
        clock.sleep(s)
        n = len(clock.sleeps)
        if n <= 3:  # stepping: every rank moves at every look
            for rank in range(4):
                write_mark(folder, rank, n, clock.now)
        if n == 4:  # stamped now, but the write lands only after the 100 s stall
            stamped = clock.now

            def landed(directory):
                for rank in range(4):
                    write_mark(folder, rank, 4, stamped)
                return real_read(directory)
            monkeypatch.setattr(stacks, "read_slots", landed)
        if n == 5:  # stepping again, then stuck for good after the 6th look
            monkeypatch.setattr(stacks, "read_slots", real_read)
            for rank in range(4):
                write_mark(folder, rank, 5, clock.now)
    real_read = stacks.read_slots
    monkeypatch.setattr(stacks.subprocess, "call", lambda argv, timeout: 0)
    monkeypatch.setattr(stacks, "list_steps", lambda job: [])
    start = clock.now
    stacks.watch("81", str(tmp_path), 30, 5, 1, [sys.executable, "-c", ""], clock=clock.time,
                 sleep=sleep)
    out = capsys.readouterr().out
    # The stall: the 4th look came 105 s after the 3rd, 100 s late (its write was held up).
    assert out.splitlines()[0] == (
        f"job 81: launch.hang_timeout: storage stalled: the watcher's look at {tmp_path} came "
        "100 s late (its own write or read there was held up); time in a stall is not counted "
        "as no progress: the deadline counts from now (docs/guide/hangs.md)"), out
    assert out.count("storage stalled") == 1, out
    # Not ended at the 4th look (marks 100 s old), but 30 s after the last progress (5th look).
    last_progress = start + 4 * 5 + 100 + 5
    assert out.splitlines()[1].startswith(
        f"job 81: no progress for 30 s (launch.hang_timeout 30) at "
        f"{stacks.time_text(last_progress + 30)}"), out


def test_a_mark_that_lands_late_is_named(tmp_path):
    """A mark that changed since the last look but was stamped well before it: its write was
    late (storage held it up), told apart from a rank that made no progress (no new mark) by
    the time the rank stamped, never the file's mtime."""
    folder = tmp_path / "progress"
    folder.mkdir()
    for rank in range(4):
        write_mark(folder, rank, 1, 1000.0)
    before = stacks.read_slots(str(tmp_path))
    write_mark(folder, 2, 2, 1001.0)  # stamped at 1001, read first at the look at 1200
    write_mark(folder, 3, 2, 1195.0)  # written in time
    os.utime(folder / "marks.jwb1", (1200.0, 1200.0))  # mtime says nothing either way
    after = stacks.read_slots(str(tmp_path))
    assert stacks.late_marks(after, before, 1190.0, 10.0) == {2: 189.0}
    assert stacks.late_marks(after, after, 1190.0, 10.0) == {}  # unchanged: no progress, not late
    assert stacks.overdue(stacks.marks_of(after), 1250.0, 30, counted_from=1200.0) == 50.0
    assert stacks.overdue(stacks.marks_of(after), 1250.0, 30, counted_from=1240.0) is None
