"""Ring 1: the fault matrix's rows (tests/helpers/faultrows.py): a row per test written whole,
the table sorted by failure, a missing value shown as "-" ("not restarted" for the steps), no
rows -> one line and status 1, the guide's block replaced in place (and refused where it has
none)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import faultrows


def test_rows_make_a_sorted_table(tmp_path, monkeypatch):
    monkeypatch.setenv(faultrows.DIR_ENV, str(tmp_path))
    faultrows.record("lab/t.py::test_z[enroot]", "a training node killed (enroot)",
                     "a spare takes its place, no requeue", 0, 17.25, 10, 10)
    faultrows.record("lab/t.py::test_a", "a node hangs", "replaced", 1, None, 11, 10)
    faultrows.record("lab/t.py::test_b", "a blip", "waited out", 0, None, None, None)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "lab_t.py_test_a.json", "lab_t.py_test_b.json", "lab_t.py_test_z_enroot_.json"]
    lines = faultrows.table(faultrows.read(tmp_path)).splitlines()
    assert lines[0].startswith("| failure | outcome | requeues | training again |")
    assert lines[2] == "| a blip | waited out | 0 | - | not restarted | `test_b` |"
    assert lines[3] == "| a node hangs | replaced | 1 | - | 11 -> 10 | `test_a` |"
    assert lines[4] == ("| a training node killed (enroot) | a spare takes its place, no requeue "
                        "| 0 | 17.2 s | 10 -> 10 | `test_z[enroot]` |")
    assert len(lines) == 5


def test_no_rows_is_one_line_and_status_1(tmp_path, capsys):
    assert faultrows.main([str(tmp_path / "none")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no rows in" in err


def test_the_guide_block_is_replaced_in_place(tmp_path, monkeypatch):
    monkeypatch.setenv(faultrows.DIR_ENV, str(tmp_path / "rows"))
    faultrows.record("t::test_x", "f", "o", 0, 1.0, 5, 5)
    guide = tmp_path / "guide.md"
    guide.write_text(f"# head\n{faultrows.BEGIN}\nold table\n{faultrows.END}\ntail\n")
    assert faultrows.main([str(tmp_path / "rows"), "--guide", str(guide), "--commit",
                           "abc123"]) == 0
    page = guide.read_text()
    assert page.startswith("# head\n<!-- fault-table -->\nMeasured ") and "abc123" in page
    assert "old table" not in page and "| f | o | 0 | 1.0 s | 5 -> 5 | `test_x` |" in page
    assert page.endswith(f"{faultrows.END}\ntail\n")
    bare = tmp_path / "bare.md"
    bare.write_text("no block\n")
    with pytest.raises(SystemExit, match="no <!-- fault-table -->"):
        faultrows.main([str(tmp_path / "rows"), "--guide", str(bare)])
    assert bare.read_text() == "no block\n"


def test_the_guide_has_the_block():
    guide = Path(faultrows.REPO / "docs/guide/spare-nodes.md").read_text()
    assert guide.count(faultrows.BEGIN) == 1 and guide.count(faultrows.END) == 1
