"""Code shipped to compute nodes as source: stdlib-only modules, one ``python3 -c`` script.

Where it sits: the composer (login node) -> **shipped** -> the jobscript's text -> each node's
``python3 -I -c SCRIPT ARGS`` (the host python3 for task scripts outside a container, the
image python3 under pyxis, the host python3 for the doctor). Why shipped and not imported:
the task script and the doctor run before anyone knows that the node or the image holds the
kit. The contract every shipped module keeps (docs/development/shipped-code.md, checked by
tests/unit/test_shipped.py): standard library only, plus other modules of its bundle imported as
``from launcher.X import ...`` at top level (dropped here: the names are defined above);
no relative imports; top-level names unique within the bundle; no code that runs on import
beyond definitions (the entry point is appended here); Python 3.6 (RHEL 8 node python3).
Deterministic: only the package's own files are read.
"""

from __future__ import annotations

import ast
import shlex
from pathlib import Path
from typing import Dict, Sequence, Tuple

ROOT = Path(__file__).resolve().parent  # launcher/
# -I (isolated, any Python 3 >= 3.4): neither the submit directory nor PYTHONPATH on sys.path,
# so a user's json.py or socket.py beside their program cannot replace what the script imports.
PYTHON_ISOLATED = ("python3", "-I", "-c")
# Bundles: the files, in order (a module after those it imports), and the entry function,
# called with sys.argv[1:]; its return value is the exit status.
NET = ("net/addresses.py", "net/probe.py")
BUNDLES: Dict[str, Tuple[Tuple[str, ...], str]] = {
    "net": (NET, "task_env_main"),
    "doctor": (NET + ("doctor/local.py", "doctor/node.py", "doctor/report.py"), "main"),
}
KIT = "launcher"


def module_source(path: str) -> str:
    """One shipped file as it goes into a bundle: its imports of the kit removed."""
    text = (ROOT / path).read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    for node in reversed(ast.parse(text).body):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == KIT:
            assert node.end_lineno is not None
            del lines[node.lineno - 1:node.end_lineno]
    return "".join(lines)


def source(name: str) -> str:
    """The bundle ``name`` as one script: ``python3 -I -c SCRIPT ARGS`` runs its entry."""
    files, entry = BUNDLES[name]
    body = "\n".join(module_source(f) for f in files)
    return body + f'\n\nif __name__ == "__main__":\n    import sys\n    sys.exit({entry}(sys.argv[1:]))\n'


def command(name: str, args: Sequence[str]) -> str:
    """Shell text that runs bundle ``name`` with ``args`` (already shell text, e.g.
    '"$MASTER_ADDR"'): the source inline, single-quoted."""
    return " ".join([*PYTHON_ISOLATED, shlex.quote(source(name)), *args])
