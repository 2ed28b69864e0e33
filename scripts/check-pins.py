#!/usr/bin/env python3
"""Tell whether this Python has exactly the versions a pinned requirements file names.

    python check-pins.py [--quiet] FILE

FILE holds `name==version` lines (comments and blank lines ignored; requirements/launchers.txt).
Exit 0 when every pin is installed at its version ("pins ok: N from FILE" unless --quiet),
1 with one line naming what is missing or differs, 2 for a file it cannot read. Used by
scripts/setup.sh (install only when needed) and by the launchers image's %test.
"""

import re
import sys
from importlib import metadata


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def read_pins(path: str) -> dict:
    pins = {}
    with open(path, encoding="utf-8") as f:
        for number, raw in enumerate(f, 1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            name, sep, version = line.partition("==")
            if not sep or not name.strip() or not version.strip():
                raise ValueError(f"{path}:{number}: {line!r} is not name==version")
            pins[normalize(name.strip())] = version.strip()
    return pins


def installed_versions() -> dict:
    found = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            found.setdefault(normalize(name), dist.version)
    return found


def problems(pins: dict, found: dict) -> list:
    out = []
    for name, version in sorted(pins.items()):
        have = found.get(name)
        if have is None:
            out.append(f"{name} missing")
        elif have != version:
            out.append(f"{name} {have} (pinned {version})")
    return out


def main(argv: list) -> int:
    quiet = "--quiet" in argv
    args = [a for a in argv if a != "--quiet"]
    if len(args) != 1:
        print("check-pins: usage: check-pins.py [--quiet] FILE", file=sys.stderr)
        return 2
    try:
        pins = read_pins(args[0])
    except (OSError, ValueError) as exc:
        print(f"check-pins: {exc}", file=sys.stderr)
        return 2
    wrong = problems(pins, installed_versions())
    if wrong:
        print(f"check-pins: {len(wrong)} of {len(pins)} pins from {args[0]} not installed: "
              + ", ".join(wrong), file=sys.stderr)
        return 1
    if not quiet:
        print(f"pins ok: {len(pins)} from {args[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
