"""Spec values that may use the job's environment, and those that may not.

Where it sits: **spec** (called by launcher.spec, spec_site, spec_runtime) -> shell
(``expansion``) -> jobscript text. Paths and program arguments (program, launch.command,
runtime.image, runtime.binds, runtime.cache_dir, site.venv, site.venv_build.pip_options and
.horovod.nccl_home) may write ``$NAME``, ``${NAME}`` or a leading ``~/``: they are expanded
on the node when the script runs, where the job's environment is ($SCRATCH, $PROJECT,
$HOME); ``$$`` is a literal '$' and every other character reaches the program unchanged.
docs/spec-values.md lists every key.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["anchored", "expandable", "literal"]

from launcher.shell import anchored
from launcher.yamlread import Reader

# ${ not followed by NAME}: a shell operator such as ${X:-default} that is not expanded here.
_BAD_BRACE = re.compile(r"(?<!\$)(?:\$\$)*\$\{(?![A-Za-z_][A-Za-z0-9_]*\})")


def expandable(r: Reader, path: str, text: str) -> str:
    """A value expanded at run time: refuse the shell forms it does not expand."""
    if _BAD_BRACE.search(text):
        raise r.fail(path, "only $NAME and ${NAME} are expanded (at run time, on the node); "
                     "${NAME:-...} and other operators are not: write the value, or '$$' "
                     "for a literal '$'", text)
    return text


def literal(r: Reader, path: str, value: Any) -> None:
    """A value written into the script literally: refuse '$' and a leading '~'."""
    if isinstance(value, str) and ("$" in value or value.startswith("~/")):
        raise r.fail(path, "is used literally: '$VAR' and '~' are not expanded here; write "
                     "the value itself (docs/spec-values.md lists the keys that expand them)",
                     value)
