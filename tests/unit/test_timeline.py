"""Issue 36 item 3: `jsc-compose timeline JOBID` reads the marks each node of a job appended to
.timeline/JOBID/NODE, prints one line per node and phase, names the slowest node and phase and
draws an SVG.

Ring 1: marks written here as the job writes them (the writers themselves run in
tests/fakes/test_timeline.py; a real lab job's timeline: tests/lab/test_hangs.py).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from launcher import cli
from launcher.submit import timeline

NODE1 = """\
1000.000 batch_start
1000.500 step_start
1001.200 container_up pid=11
1002.000 decided
1003.000 rendezvous_done
1003.300 workers_started rank=0
1003.400 workers_started rank=1
1005.000 process_group_up rank=0
1005.100 process_group_up rank=1
1005.300 first_collective rank=0
1005.310 first_collective rank=1
1020.000 launch_end
"""
NODE2 = """\
1003.900 container_up pid=12
1004.100 decided
1004.
1004.500 rendezvous_done
1004.600 workers_started rank=2
1004.700 workers_started rank=3
1005.050 process_group_up rank=2
1005.100 process_group_up rank=3
1005.300 first_collective rank=2
1005.320 first_collective rank=3
1030.000 rendezvous_done
"""


def job(tmp_path: Path, files) -> Path:
    folder = tmp_path / ".timeline" / "55"
    folder.mkdir(parents=True)
    for node, text in files.items():
        (folder / node).write_text(text)
    return tmp_path


def test_one_line_per_node_and_phase_and_the_slowest_named(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    monkeypatch.chdir(job(tmp_path, {"jwb0001": NODE1, "jwb0002": NODE2}))
    assert cli.main(["timeline", "55"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == ("timeline of job 55: 2 nodes, batch script started 1970-01-01 00:16:40 "
                      "UTC on jwb0001, launch ended after 20.00 s")
    assert out[1].split() == ["node", "phase", "at", "took"]
    table = {(line[:7], line[9:31].strip()): line[31:].split() for line in out[2:16]}
    assert table[("jwb0001", "batch start")] == ["0.00", "s"]  # time 0
    assert table[("jwb0001", "step start")] == ["0.50", "s", "0.50", "s"]
    # container up runs from the step's start; a rank phase is the node's last rank's
    assert table[("jwb0002", "container up")] == ["3.90", "s", "3.40", "s"]
    assert table[("jwb0001", "process group up (2)")] == ["5.10", "s", "1.70", "s"]
    assert table[("jwb0002", "first collective (2)")] == ["5.32", "s", "0.22", "s"]
    # a line cut short is skipped; a later rendezvous (a restart) does not move the first
    assert table[("jwb0002", "rendezvous done")] == ["4.50", "s", "0.40", "s"]
    assert len(table) == 14
    assert out[16] == ("slowest node: jwb0002, first collective at 5.32 s (the fastest node "
                       "there at 5.31 s)")
    assert out[17] == ("slowest phase: container up on jwb0002, 3.40 s (median over 2 nodes: "
                       "2.05 s)")
    assert out[18] == "picture: .timeline/55.svg (open it in a browser)"
    assert (tmp_path / ".timeline" / "55.svg").read_text().startswith("<svg ")


def test_a_running_job_and_a_node_that_got_less_far(tmp_path):
    stuck = "\n".join(NODE2.splitlines()[:4]) + "\n"  # up to its rendezvous
    tl = timeline.read("55", str(job(tmp_path, {"jwb0001": NODE1.replace("1020.000 launch_end\n",
                                                                           ""),
                                                "jwb0002": stuck, "jwb0003": NODE2})))
    text = timeline.report(tl)
    assert text.splitlines()[0].endswith(
        ", no launch end yet (running, or ended before the batch script's last word)")
    assert "slowest node: jwb0002, rendezvous done at 4.50 s (the others got further: first " \
        "collective)\n" in text


def test_the_picture_has_a_bar_per_node_and_phase(tmp_path):
    tl = timeline.read("55", str(job(tmp_path, {"jwb0001": NODE1, "jwb0002": NODE2})))
    root = ET.fromstring(timeline.svg(tl))
    ns = "{http://www.w3.org/2000/svg}"
    bars = [r for r in root.iter(f"{ns}rect") if r.find(f"{ns}title") is not None]
    titles = [r.find(f"{ns}title").text for r in bars]
    assert len(bars) == 2 * (1 + 6)  # the batch script's part and 6 phases per node
    assert "jwb0002: container up, 3.40 s (until 3.90 s)" in titles
    assert "jwb0001: batch script, 0.50 s (until 0.50 s)" in titles
    widths = {t: float(r.get("width")) for t, r in zip(titles, bars)}
    assert widths["jwb0002: container up, 3.40 s (until 3.90 s)"] > \
        4 * widths["jwb0001: container up, 0.70 s (until 1.20 s)"]
    legend = [t.text for t in root.iter(f"{ns}text")]
    assert {"batch script", "first collective", "rendezvous done"} <= set(legend)


def test_no_marks_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(timeline, "work_dir", lambda job: None)  # Slurm knows no such job
    assert cli.main(["timeline", "77"]) == 1
    err = capsys.readouterr().err
    assert err == ("timeline: no marks of job 77 in .timeline/77 (run it in the job's submit "
                   "directory or give --dir; jobs rendered by an older kit write none)\n"), err
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    assert cli.main(["timeline", "abc"]) == 2
    assert capsys.readouterr().err == ("timeline: jobid: a numeric Slurm job id (or run it "
                                       "inside the job), got 'abc'\n")  # as stacks says it


def test_parse_line():
    assert timeline.parse_line("1.5 first_collective rank=3") == (1.5, "first_collective",
                                                                   "rank=3")
    assert timeline.parse_line("1.5 batch_start") == (1.5, "batch_start", "")
    for bad in ("", "1.5", "x batch_start", "1.5 nonsense", "1.5 decided a b"):
        assert timeline.parse_line(bad) is None, bad


# job.spare_nodes: jwb0002 found lost at 1040 by the supervisor on the batch host, the spare
# jwb0003 started; jwb0001's workers restart and re-rendezvous with the spare's.
LOSS = """\
1040.000 node_lost jwb0002
1040.010 spare_started jwb0003
1052.000 rendezvous_done
1052.200 workers_started rank=0
1052.300 workers_started rank=1
1054.000 process_group_up rank=0
1054.100 process_group_up rank=1
1054.500 first_collective rank=0
1054.600 first_collective rank=1
"""
SPARE = """\
1043.000 container_up pid=31
1044.000 decided
1052.100 rendezvous_done
1052.400 workers_started rank=2
1052.500 workers_started rank=3
1054.000 process_group_up rank=2
1054.200 process_group_up rank=3
1054.700 first_collective rank=2
1055.000 first_collective rank=3
"""


def test_a_recovery_is_its_own_round_and_the_start_up_stays_as_it_was(tmp_path):
    """The marks after a node's loss (the re-rendezvous, the restarted workers, the spare's
    start) are the recovery's: the start-up's lines stay those of a job without one."""
    node1 = NODE1.replace("1020.000 launch_end\n", "") + LOSS + "1070.000 launch_end\n"
    tl = timeline.read("55", str(job(tmp_path, {"jwb0001": node1, "jwb0002": NODE2,
                                                "jwb0003": SPARE})))
    text = timeline.report(tl).splitlines()
    assert text[0].startswith("timeline of job 55: 2 nodes,"), text  # the start-up's nodes
    assert "jwb0001  first collective (2)       5.31 s     0.21 s" in text, text
    i = text.index("recovery 1: jwb0002 lost at 40.00 s, spare jwb0003 started at 40.01 s")
    recovery = text[i + 1:]
    assert "jwb0001  rendezvous done           52.00 s    12.00 s" in recovery, recovery
    assert "jwb0003  container up              43.00 s     3.00 s" in recovery, recovery
    assert "jwb0003  first collective          55.00 s     0.80 s" in recovery, recovery
    assert recovery[-1] == ("recovery 1: training again 15.00 s after the loss (first "
                            "collective of 2 nodes, the last jwb0003)"), recovery
    root = ET.fromstring(timeline.svg(tl))
    ns = "{http://www.w3.org/2000/svg}"
    lines = [t.text for e in root.iter(f"{ns}line") for t in e.findall(f"{ns}title")]
    assert lines == ["jwb0002 lost at 40.00 s, spare jwb0003"], lines
    titles = [t.text for e in root.iter(f"{ns}rect") for t in e.findall(f"{ns}title")]
    assert "jwb0003: first collective, 0.80 s (until 55.00 s)" in titles, titles


def test_the_folded_file_reads_as_the_folder_did(tmp_path, capsys, monkeypatch):
    """After the launch the job folds its node files into .timeline/JOBID.marks (issue 43:
    one file per job, not one per node); the command reads that file alike."""
    monkeypatch.setenv("TZ", "UTC")
    monkeypatch.chdir(job(tmp_path, {"jwb0001": NODE1, "jwb0002": NODE2}))
    assert cli.main(["timeline", "55"]) == 0
    from_folder = capsys.readouterr().out
    folder = tmp_path / ".timeline" / "55"
    folded = "".join(f"{node} {line}\n" for node in ("jwb0001", "jwb0002")
                     for line in (folder / node).read_text().splitlines())
    for node in ("jwb0001", "jwb0002"):
        (folder / node).unlink()
    folder.rmdir()
    (tmp_path / ".timeline" / "55.marks").write_text(folded)
    assert cli.main(["timeline", "55"]) == 0
    assert capsys.readouterr().out == from_folder
