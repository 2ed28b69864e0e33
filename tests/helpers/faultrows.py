"""The fault matrix's rows (issue 41): each lab test of a failure (marker ``faults``) writes one
row once its assertions passed, and this prints them as a table.

    python3 tests/helpers/faultrows.py DIR [--guide FILE --commit C]

DIR holds one JSON file per test (``record``); without rows it says so and exits 1. With
``--guide`` the table replaces the block between ``<!-- fault-table -->`` and
``<!-- /fault-table -->`` in FILE, with the date and commit (docs/guide/spare-nodes.md).
`make test-faults` runs the rows and prints the table; `make test` prints lane b's rows at its
end. Standard library only.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import sys
from pathlib import Path
from typing import Dict, List, Optional

REPO = Path(__file__).resolve().parents[2]
DIR_ENV = "TORCHRUN_JSC_FAULT_ROWS"
DEFAULT_DIR = REPO / "build/test-results/faults"
COLUMNS = ("failure", "outcome", "requeues", "training again", "last step seen -> resumed from",
           "test")
BEGIN, END = "<!-- fault-table -->", "<!-- /fault-table -->"


def rows_dir() -> Path:
    return Path(os.environ.get(DIR_ENV) or DEFAULT_DIR)


def record(nodeid: str, failure: str, outcome: str, requeues: int,
           again_s: Optional[float], seen: Optional[int], resumed: Optional[int]) -> Path:
    """One row for the test ``nodeid``, written whole (a temporary file renamed). again_s:
    from the loss to the first collective of every node again (the job's timeline), None
    where a requeue came between; seen: the last step the program printed before the
    failure; resumed: the checkpoint's step it went on from (the steps between are redone,
    and up to a checkpoint interval more that ran unprinted); None for both where the
    program was never restarted."""
    directory = rows_dir()
    directory.mkdir(parents=True, exist_ok=True)
    row = {"failure": failure, "outcome": outcome, "requeues": requeues,
           "again_s": again_s, "seen": seen, "resumed": resumed, "test": nodeid}
    path = directory / (re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid) + ".json")
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(row, sort_keys=True) + "\n")
    tmp.replace(path)
    return path


def read(directory: Path) -> List[Dict[str, object]]:
    rows = [json.loads(p.read_text()) for p in sorted(directory.glob("*.json"))]
    return sorted(rows, key=lambda r: (str(r["failure"]), str(r["test"])))


def cell(value: object, unit: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.1f}{unit}"
    return f"{value}{unit}"


def steps(row: Dict[str, object]) -> str:
    if row["seen"] is None and row["resumed"] is None:
        return "not restarted"
    return f"{cell(row['seen'])} -> {cell(row['resumed'])}"


def table(rows: List[Dict[str, object]]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in rows:
        test = str(r["test"]).split("::", 1)[-1]
        lines.append("| " + " | ".join([
            str(r["failure"]), str(r["outcome"]), cell(r["requeues"]),
            cell(r["again_s"], " s"), steps(r), f"`{test}`"]) + " |")
    return "\n".join(lines) + "\n"


def put_in_guide(guide: Path, text: str, commit: str) -> None:
    page = guide.read_text()
    if BEGIN not in page or END not in page:
        raise SystemExit(f"faultrows: {guide} has no {BEGIN} ... {END} block to replace")
    head, rest = page.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    block = (f"{BEGIN}\nMeasured {when} at commit {commit} (`make test-faults`, the lab: "
             f"2 training nodes + 1 spare, gloo on CPUs):\n\n{text}{END}")
    guide.write_text(head + block + tail)


def main(argv: List[str]) -> int:
    ap = argparse.ArgumentParser(description="the fault matrix's table")
    ap.add_argument("dir", type=Path)
    ap.add_argument("--guide", type=Path)
    ap.add_argument("--commit", default="?")
    args = ap.parse_args(argv)
    rows = read(args.dir) if args.dir.is_dir() else []
    if not rows:
        print(f"faultrows: no rows in {args.dir} (no test of the fault matrix passed)",
              file=sys.stderr)
        return 1
    text = table(rows)
    sys.stdout.write(text)
    if args.guide:
        put_in_guide(args.guide, text, args.commit)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
