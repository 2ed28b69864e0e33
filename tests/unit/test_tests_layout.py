"""Ring 1: the tests' own layout. A test's ring is its folder (tests/conftest.py marks it):
no test file outside tests/unit, tests/fakes and tests/lab, no ring marker written by hand,
every test file says what it covers, docs/development/tests.md is generated from those
docstrings, and every tests/ path the repository names exists."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import RINGS, ring_of
from tests.helpers import testindex

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
TEST_FILES = sorted(p for folder in RINGS for p in (TESTS / folder).glob("test_*.py"))
TRACKED = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout.split()
PATH = re.compile(r"\btests/[\w./*-]*[\w*](?:::\w+)?")  # NAME: a placeholder; * a glob


def test_test_files_sit_in_a_ring_folder():
    stray = [str(p.relative_to(ROOT)) for p in TESTS.rglob("test_*.py")
             if p.parent.relative_to(TESTS).parts[:1] not in [(f,) for f in RINGS]]
    assert not stray, f"test files outside tests/unit, tests/fakes, tests/lab: {stray}"
    folders = {p.name for p in TESTS.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders == set(RINGS) | {"helpers"}
    with pytest.raises(pytest.UsageError, match="tests/helpers"):
        ring_of(TESTS / "helpers" / "test_x.py")


def test_rings_come_from_the_folders():
    """What `-m` selects is exactly the folder (make test-fast: -m "not ring3")."""
    for ring, folders in (("ring3", ("tests/lab/",)),
                          ("not ring3", ("tests/unit/", "tests/fakes/"))):
        p = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", ring,
                            "-p", "no:cacheprovider", "tests"], cwd=ROOT, capture_output=True,
                           text=True, timeout=120, check=False)
        ids = [ln for ln in p.stdout.splitlines() if "::" in ln]
        assert p.returncode == 0 and ids, p.stdout[-2000:] + p.stderr[-2000:]
        assert [i for i in ids if not i.startswith(folders)] == [], ring


def test_no_ring_marker_by_hand():
    marked = [str(p.relative_to(ROOT)) for p in TEST_FILES
              if re.search(r"pytest\.mark\.ring\d", p.read_text(encoding="utf-8"))]
    assert not marked, f"the folder sets the ring; remove the ring markers in {marked}"


def test_every_test_file_says_what_it_covers():
    bad = []
    for path in TEST_FILES:
        text = testindex.summary(path)
        claimed = re.match(r"Ring (\d)\b", text)
        if not text:
            bad.append(f"{path.relative_to(ROOT)}: no module docstring (the tests page lists it)")
        elif claimed and f"ring{claimed.group(1)}" != ring_of(path):
            bad.append(f"{path.relative_to(ROOT)}: the docstring says ring {claimed.group(1)}, "
                       f"the folder {ring_of(path)}")
    assert not bad, bad


def test_tests_page_is_generated():
    assert testindex.PAGE.read_text(encoding="utf-8") == testindex.render(), \
        "docs/development/tests.md is stale: run `make test-index`"


def test_named_test_paths_exist():
    bad = []
    for name in TRACKED:
        if not name.endswith((".md", ".py", ".sh", ".yml", ".yaml", ".toml")) and \
                name != "Makefile":
            continue
        text = (ROOT / name).read_text(encoding="utf-8", errors="replace")
        for m in PATH.finditer(text):
            path, _, test = m.group(0).partition("::")
            target = ROOT / path
            if "NAME" in path or ("*" in path and any(ROOT.glob(path))):
                continue
            if not target.exists():
                bad.append(f"{name}: {m.group(0)}")
            elif test and not re.search(rf"^def {test}\b", target.read_text(), re.M):
                bad.append(f"{name}: {m.group(0)} (no such test)")
    assert not bad, bad
