"""docs/reference/spec.md's tables, generated: one row per spec key as its owner declares it
(launcher.yamlread.Key: the spec loader's frame, the features, the runtimes, the modes;
launcher.spec.KEYS lists them all). `make spec-reference` rewrites the tables and leaves the
prose around them; tests/unit/test_docs.py fails while the page differs from what this
renders. A mode's key is prefixed with the modes that take it ("torchrun and
mpirun_torchrun only: ...")."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Dict, List

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "reference" / "spec.md"
HEAD = "| key | type, default | meaning |\n|---|---|---|\n"
# A table: its head, then rows, under a "## `SECTION`" heading.
_TABLE = re.compile(r"^## `(?P<section>[a-z_]+)`\n(?P<before>(?:(?!^## |^\| key ).*\n)*)"
                    r"(?P<table>\| key \| type, default \| meaning \|\n\|---\|---\|---\|\n"
                    r"(?:\|.*\n)*)", re.M)


def _phrase(names: List[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def rows() -> Dict[str, List[str]]:
    """Table rows by section (the first component of each key's path), in KEYS order."""
    sys.path.insert(0, str(ROOT))
    from launcher.modes import MODES
    from launcher.spec import KEYS

    out: Dict[str, List[str]] = {}
    for key in KEYS:
        meaning = key.meaning
        owners = [name for name, mode in MODES.items() if key in mode.keys.values()]
        if owners:
            meaning = f"{_phrase(owners)} only: {meaning}"
        paths = ", ".join(f"`{p}`" for p in key.paths)
        section = key.paths[0].split(".")[0].split("[")[0]
        out.setdefault(section, []).append(f"| {paths} | {key.form} | {meaning} |")
    return out


def render(text: str) -> str:
    """``text`` (the page) with every key table rewritten from the declarations."""
    by_section = rows()
    seen = set()

    def table(m: "re.Match[str]") -> str:
        section = m.group("section")
        seen.add(section)
        body = "".join(line + "\n" for line in by_section.get(section, []))
        return f"## `{section}`\n{m.group('before')}{HEAD}{body}"

    out = _TABLE.sub(table, text)
    missing = sorted(set(by_section) - seen)
    if missing:
        raise LookupError(f"{PAGE}: no '## `SECTION`' table for {', '.join(missing)}")
    return out


if __name__ == "__main__":
    PAGE.write_text(render(PAGE.read_text(encoding="utf-8")), encoding="utf-8")
    print(f"wrote {PAGE.relative_to(ROOT)}")
