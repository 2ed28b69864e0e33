"""Ring 1: where `-o PATH` writes (issue 43, item 2; launcher/submit/output.py): a regular
file replaced atomically with its mode kept, a new file 0644, a symlink written through with
the link kept, `render -o -` to stdout; a directory, FIFO, device, dangling symlink or missing
directory refused in one line (exit 2) before anything is written or run, for render,
submit and venv, and timeline --svg."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from launcher.cli import main
from launcher.model import SpecError
from launcher.submit.output import output_target, write_file

SPEC = "job: {nodes: 1}\nprogram: [p]\n"


@pytest.fixture
def spec(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))  # no sbatch, no pip: nothing runs
    (tmp_path / "x.yaml").write_text(SPEC)
    return tmp_path / "x.yaml"


def test_a_regular_file_is_replaced_atomically_keeping_its_mode(tmp_path):
    target = tmp_path / "a.job"
    target.write_text("old")
    target.chmod(0o600)
    inode = target.stat().st_ino
    write_file("new\n", str(target))
    assert target.read_text() == "new\n" and target.stat().st_ino != inode  # renamed over
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    write_file("x", str(tmp_path / "b.job"))
    assert stat.S_IMODE((tmp_path / "b.job").stat().st_mode) == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.job", "b.job"]  # no temp left


def test_a_symlink_to_a_regular_file_is_written_through(tmp_path):
    (tmp_path / "d").mkdir()
    real = tmp_path / "d" / "real.job"
    real.write_text("old")
    link = tmp_path / "link.job"
    link.symlink_to(real)
    write_file("new", str(link))
    assert link.is_symlink() and real.read_text() == "new"


@pytest.mark.parametrize("make, expected", [
    (lambda p: os.mkfifo(p), "is a FIFO, not a regular file"),
    (lambda p: p.mkdir(), "is a directory, not a regular file"),
    (lambda p: p.symlink_to(p.parent / "missing"), "is a symlink to a missing file"),
    (lambda p: p.symlink_to("/dev/null"), "is a character device, not a regular file"),
    (lambda p: None, None)])
def test_what_is_not_a_regular_file_is_refused(tmp_path, make, expected):
    target = tmp_path / "t.job"
    make(target)
    if expected is None:
        assert output_target(str(target)) == str(target)
        return
    with pytest.raises(SpecError, match=expected):
        output_target(str(target))


@pytest.mark.parametrize("path, expected", [
    ("/dev/null", "'/dev/null' is a character device"), ("/dev/full", "is a character device"),
    ("no/such/dir/x.job", "is in a directory that does not exist (no/such/dir)"),
    ("out/", "names a directory")])
@pytest.mark.parametrize("command", ["render", "submit", "venv"])
def test_the_cli_refuses_in_one_line_before_anything_runs(spec, capsys, command, path,
                                                          expected):
    assert main([command, str(spec), "-o", path]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("-o: ") and expected in err, err
    assert sorted(p.name for p in spec.parent.iterdir()) == ["x.yaml"]


def test_a_fifo_is_refused_without_blocking(spec, capsys):
    os.mkfifo(spec.parent / "f.job")
    assert main(["render", str(spec), "-o", "f.job"]) == 2
    assert "'f.job' is a FIFO" in capsys.readouterr().err


def test_render_dash_is_stdout_and_submit_dash_is_refused(spec, capsys):
    assert main(["render", str(spec), "-o", "-"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("#!/bin/bash\n") and not Path(spec.parent / "-").exists()
    for command in ("submit", "venv"):
        assert main([command, str(spec), "-o", "-"]) == 2
        assert "hands a file to sbatch: name one" in capsys.readouterr().err


def test_render_writes_through_a_symlink(spec, capsys):
    real = spec.parent / "real.job"
    real.write_text("old")
    (spec.parent / "x.job").symlink_to(real)
    assert main(["render", str(spec), "-o", "x.job"]) == 0
    assert real.read_text().startswith("#!/bin/bash\n") and (spec.parent / "x.job").is_symlink()


def test_timeline_svg_is_held_to_the_same_rule(spec, capsys):
    """`timeline --svg FILE` writes the picture the same way (a FIFO refused, not blocked)."""
    folder = spec.parent / ".timeline" / "55"
    folder.mkdir(parents=True)
    (folder / "jwb0001").write_text("1.0 batch_start\n2.0 step_start\n")
    os.mkfifo(spec.parent / "pic.svg")
    assert main(["timeline", "55", "--svg", "pic.svg"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'pic.svg' is a FIFO, not a regular file: --svg writes" in err
    assert main(["timeline", "55", "--svg", "ok.svg"]) == 0
    assert (spec.parent / "ok.svg").read_text().startswith("<svg ")
