"""Ring 1: the nodes the spares' supervisor retired (launcher/node/retired.py) and the steps
over the allocation that leave them out: the argv's rewrite, the file's reading and writing,
the supervisor's own stacks collector (the progress deadline's, launch.hang_action replace).
The batch script's side, run by bash with the real supervisor: tests/fakes/test_live_nodes.py.
"""

from __future__ import annotations

import sys

from launcher.node import retired, spares, stacks

COLLECTOR = ["srun", "--overlap", "--jobid=42", "--nodes=3", "--ntasks=3",
             "--ntasks-per-node=1", "--cpus-per-task=1", "--kill-on-bad-exit=0", "python3",
             "-I", "/kit/node/run.py", "stacks", "node", "42", "10"]


def test_live_argv_excludes_the_lost_and_counts_the_rest():
    assert retired.live_argv(COLLECTOR, ["n2"]) == [
        "srun", "--overlap", "--jobid=42", "--exclude=n2", "--nodes=2", "--ntasks=2",
        *COLLECTOR[5:]]
    assert retired.live_argv(COLLECTOR, ["n2", "n3", "n2", ""])[3:6] == [
        "--exclude=n2,n3", "--nodes=1", "--ntasks=1"]


def test_live_argv_with_none_lost_is_the_same_argv():
    argv = retired.live_argv(COLLECTOR, [])
    assert argv == COLLECTOR and argv is not COLLECTOR


def test_read_takes_whole_lines_once(tmp_path):
    path = tmp_path / "retired"
    path.write_text("n2\n\nn3\nn2\nn4")  # n4: its newline not written yet
    assert retired.read(str(path)) == ["n2", "n3"]
    assert retired.read(str(tmp_path / "none")) == [] and retired.read(None) == []


def test_record_appends_and_never_creates(tmp_path):
    path = tmp_path / "retired"
    assert not retired.record(str(path), "n2") and not path.exists()
    assert not retired.record(None, "n2") and not retired.record("", "n2")
    path.write_text("n1\n")
    assert retired.record(str(path), "n2") and retired.record(str(path), "n3")
    assert path.read_text() == "n1\nn2\nn3\n"


def test_the_note_says_how_many_and_which():
    assert retired.note("7", "unstaging", 3, ["jwb0002"]) == \
        "job 7: unstaging on 2 of 3 nodes (jwb0002 lost)"
    assert retired.nodes_of(COLLECTOR) == 3 and retired.nodes_of(["srun"]) is None


def test_the_supervisors_collector_leaves_its_retired_nodes_out(tmp_path, capsys):
    sup = spares.Supervisor("42", 4, ["n1", "n2"], ["n3"], ["srun"],
                            hang=(str(tmp_path), 2.0, 0.5, 1.0, COLLECTOR))
    try:
        assert sup.collector() == COLLECTOR
        assert capsys.readouterr().out == ""
        sup.retired.append("n2")  # as retire() does, with the batch script's file
        assert sup.collector()[3:6] == ["--exclude=n2", "--nodes=2", "--ntasks=2"]
        assert capsys.readouterr().out == "job 42: stacks on 2 of 3 nodes (n2 lost)\n"
    finally:
        sup.marks.close()


def test_the_watcher_asks_a_function_for_its_collector_at_each_use():
    calls = []

    def collector():
        calls.append(1)
        return [sys.executable, "-c", "print('{\"node\": \"n1\"}')"]

    assert stacks._collect(collector) == [{"node": "n1"}] and calls == [1]
