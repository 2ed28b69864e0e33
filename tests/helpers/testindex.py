"""docs/development/tests.md, generated: every test file by ring (its folder) with the first
paragraph of its docstring. `make test-index` rewrites the page; tests/unit/test_tests_layout.py
fails while it differs from what this renders."""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from typing import List

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "development" / "tests.md"
RINGS = [  # (folder, heading), in the order of tests/conftest.py's RINGS
    ("unit", "Ring 1: tests/unit (pure: no torch, no root, no Slurm)"),
    ("fakes", "Ring 2: tests/fakes (rendered scripts and local processes under recording "
              "fakes; no root, no Slurm)"),
    ("lab", "Ring 3: tests/lab (real Slurm, Apptainer, Enroot, torch; root and `make setup`)"),
]


def summary(path: Path) -> str:
    """The first paragraph of the file's docstring on one line ('' when it has none)."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    return " ".join(doc.split("\n\n")[0].split())


def render(root: Path = ROOT) -> str:
    lines: List[str] = [
        "# Tests, file by file",
        "",
        "Generated from each test file's docstring by `make test-index`",
        "(tests/helpers/testindex.py); a ring 1 test fails while this page is stale. A test's",
        "ring is its folder ([rings and folders](index.md#tests)); what each costs:",
        "[test-times.md](test-times.md), from a recorded `make test` run.",
    ]
    for folder, heading in RINGS:
        lines += ["", f"## {heading}", ""]
        for path in sorted((root / "tests" / folder).glob("test_*.py")):
            lines.append(f"- `{path.name}`: {summary(path)}")
    return "\n".join(lines) + "\n"


def main() -> int:
    PAGE.write_text(render(), encoding="utf-8")
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
