"""Ring 1: what the tests cost (tests/helpers/durations.py, issue 42 item 5): the run's wall time,
the time per ring and per file and the slowest tests read from pytest's JUnit XML (one test
class, parametrized names, a failure and a skip among them), the summary `make test` prints at
its end, and the page `make test-times` writes (docs/development/test-times.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.helpers import durations

REPO = Path(__file__).resolve().parents[2]
# The recorded run's files are made up: named here, not as tests/ paths (test_tests_layout checks
# that every tests/ path the repository names exists).
HANGS = "/".join(("tests", "lab", "test_hangs.py"))

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="0" failures="1" skipped="1" tests="5" time="754.250"
 timestamp="2026-11-28T18:40:00.000000" hostname="ci">
<testcase classname="tests.unit.test_spec" name="test_a" time="0.020"/>
<testcase classname="tests.fakes.test_spares" name="test_b[x-1]" time="12.500"/>
<testcase classname="tests.lab.test_hangs.TestDeadline" name="test_c" time="190.000">
  <failure message="boom">trace</failure></testcase>
<testcase classname="tests.lab.test_hangs" name="test_d" time="200.000"/>
<testcase classname="tests.lab.test_ddp" name="test_e" time="0.000"><skipped message="m"/></testcase>
</testsuite></testsuites>
"""


def run(tmp_path: Path) -> durations.Run:
    path = tmp_path / "junit.xml"
    path.write_text(JUNIT)
    return durations.read(str(path))


def test_cases_are_read_with_their_file_ring_and_outcome(tmp_path):
    r = run(tmp_path)
    assert r.wall_s == 754.25 and r.started.startswith("2026-11-28T18:40")
    got = [(c.file, c.name, c.seconds, c.outcome, c.ring) for c in r.cases]
    assert got[1] == ("tests/fakes/test_spares.py", "test_b[x-1]", 12.5, "passed",
                      "ring 2 (tests/fakes)")
    assert got[2][:4] == (HANGS, "test_c", 190.0, "failed")
    assert got[4][3] == "skipped"
    assert durations.by(r.cases, lambda c: c.file)[0] == (HANGS, 390.0, 2)


def test_summary_says_the_total_and_the_slowest_first(tmp_path):
    text = durations.summary(run(tmp_path), top=2)
    lines = text.splitlines()
    assert lines[0] == "tests: 5 in 12 min 34.2 s wall (1 failed, 3 passed, 1 skipped)", text
    assert "  ring 3 (tests/lab): 3 tests, 6 min 30.0 s of test time" in lines
    assert lines[-3:] == ["the 2 slowest tests:", f"    200.0 s  {HANGS}::test_d",
                          f"    190.0 s  {HANGS}::test_c"], text


def test_two_lanes_are_one_run_from_the_first_start_to_the_last_end(tmp_path):
    (tmp_path / "a.xml").write_text(JUNIT)
    (tmp_path / "b.xml").write_text(JUNIT.replace('time="754.250"', 'time="100.0"').replace(
        "18:40:00", "18:50:00"))
    r = durations.read(str(tmp_path / "a.xml"), str(tmp_path / "b.xml"))
    assert len(r.cases) == 10 and r.wall_s == 754.25, r.wall_s  # b ended first
    (tmp_path / "b.xml").write_text(JUNIT.replace("18:40:00", "18:50:00"))
    r = durations.read(str(tmp_path / "a.xml"), str(tmp_path / "b.xml"))
    assert r.wall_s == 600 + 754.25 and r.started.startswith("2026-11-28T18:40"), r


def test_the_page_and_the_cli(tmp_path):
    (tmp_path / "junit.xml").write_text(JUNIT)
    out = tmp_path / "times.md"
    p = subprocess.run([sys.executable, str(REPO / "tests/helpers/durations.py"),
                        str(tmp_path / "junit.xml"), "--page", str(out), "--commit", "abc123"],
                       capture_output=True, text=True, timeout=60, check=False)
    assert p.returncode == 0, p.stderr
    page = out.read_text()
    assert "commit abc123" in page and f"| `{HANGS}` | 2 | 390.0 |" in page
    bad = subprocess.run([sys.executable, str(REPO / "tests/helpers/durations.py"),
                          str(tmp_path / "missing.xml")], capture_output=True, text=True,
                         timeout=60, check=False)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1, bad.stderr
    assert bad.stderr.startswith("durations.py: cannot read "), bad.stderr
    # one lane of three wrote none (it died): the others' summary, and that lane said
    part = subprocess.run([sys.executable, str(REPO / "tests/helpers/durations.py"),
                           str(tmp_path / "junit.xml"), str(tmp_path / "junit-c.xml")],
                          capture_output=True, text=True, timeout=60, check=False)
    assert part.returncode == 0 and part.stdout.startswith("tests: "), part.stdout + part.stderr
    assert part.stderr == f"durations.py: no {tmp_path / 'junit-c.xml'} (its lane wrote no " \
        "JUnit XML)\n", part.stderr
