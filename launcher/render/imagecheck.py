"""`jsc-compose check --image`: does the spec's image have what the kit's modes need?

Where it sits: the CLI's edge (launcher.cli runs :func:`probe_argv` in the image on the login
node) -> **imagecheck** (:func:`verdict`, pure) -> one line. The kit itself need not be in the
image (its node-side code is bound in from the kit, docs/development/node-code.md); what must
be there: python3 >= 3.8 (torchrun_jsc, the task scripts), torch >= 1.9 (torchrun), and the
commands the spec starts in it (a launcher such as accelerate or deepspeed, the program's
interpreter).
"""

from __future__ import annotations

import re
from typing import List, Optional, Sequence, Tuple

from launcher.model import JobSpec
from launcher.modes.common import KIT_PROGRAMS
from launcher.task.torchrun_jsc.decide import MIN_TORCH, MIN_TORCH_TEXT

MIN_PYTHON = (3, 8)
# Run by sh in the image: one "WHAT VALUE" line per fact, VALUE "none" where it is missing.
PROBE = r"""if command -v python3 >/dev/null 2>&1; then
    python3 -c 'import sys; print("python3 %d.%d" % sys.version_info[:2])'
    python3 -c 'import torch; print("torch " + torch.__version__)' 2>/dev/null || echo "torch none"
else
    echo "python3 none"
fi
for c in "$@"; do
    if command -v "$c" >/dev/null 2>&1; then echo "command $c"; else echo "command $c none"; fi
done"""


def commands(spec: JobSpec) -> List[str]:
    """The commands the spec starts in the image by name: its launcher (not the kit's own
    programs, which come from the kit) and the program's first word."""
    out = []
    launcher = spec.launch.command[0] if spec.launch.command else None
    if launcher and launcher not in KIT_PROGRAMS and "/" not in launcher and "$" not in launcher:
        out.append(launcher)
    first = spec.program[0]
    if "/" not in first and "$" not in first and first not in out:
        out.append(first)
    return out


def probe_argv(local_exec: Sequence[str], wanted: Sequence[str]) -> List[str]:
    """PROBE in the image, asking for the commands ``wanted``; ``local_exec``: the runtime's
    argv prefix that runs a command in the image."""
    return [*local_exec, "sh", "-c", PROBE, "probe", *wanted]


def _version(text: str) -> Optional[Tuple[int, ...]]:
    found = re.match(r"(\d+)\.(\d+)", text)
    return (int(found[1]), int(found[2])) if found else None


def verdict(output: str, wanted: Sequence[str]) -> Tuple[str, List[str]]:
    """(what the image has, in words; what it lacks, one phrase each) from PROBE's output."""
    facts = {}
    found = []
    for line in output.splitlines():
        what, _, value = line.partition(" ")
        if what == "command":
            name, _, none = value.partition(" ")
            if not none:
                found.append(name)
        elif what in ("python3", "torch"):
            facts[what] = value
    problems = []
    python, torch = facts.get("python3", "none"), facts.get("torch", "none")
    if python == "none":
        problems.append("no python3 (torchrun_jsc and the task scripts need python3 >= "
                        f"{'.'.join(map(str, MIN_PYTHON))})")
    elif (_version(python) or (0, 0)) < MIN_PYTHON:
        problems.append(f"python3 {python} (the kit needs >= {'.'.join(map(str, MIN_PYTHON))})")
    if python != "none" and torch == "none":
        problems.append("no torch for python3")
    elif torch != "none" and (_version(torch) or (0, 0)) < MIN_TORCH:
        problems.append(f"torch {torch} (torchrun needs >= {MIN_TORCH_TEXT})")
    problems += [f"no {name} on its PATH" for name in wanted if name not in found]
    have = [f"python3 {python}"] if python != "none" else []
    have += [f"torch {torch}"] if torch != "none" else []
    have += [name for name in found if name != "python3"]
    return ", ".join(have), problems


__all__ = ["MIN_PYTHON", "PROBE", "commands", "probe_argv", "verdict"]
