"""Reading YAML for the spec loader: no duplicate keys, typed accessors that raise SpecError
with the YAML path of the offending value, and the two kinds of spec value (expanded on the
node, or written literally).

The text itself is parsed in launcher.yamlload (bounded; YAML 1.2's numbers).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Any, Optional, Sequence, Tuple, cast

from launcher.model import MISSING, SpecError
from launcher.yamlload import AMBIGUOUS_INT, load_yaml
from launcher.shell import anchored, expansion_names


@dataclass(frozen=True)
class Key:
    """One spec key (or a few read alike), declared once, beside the code that reads it: the
    loader's mappings accept the names declared under them (:func:`key_names`) and the spec
    reference's tables (docs/reference/spec.md) are these rows (`make spec-reference`).
    ``why``: a mode's key, what it is, for the error another mode gives ("{modes}" becomes
    the modes that take it)."""

    paths: Tuple[str, ...]  # dotted, as errors write them: ("job.requeue.before",)
    form: str  # type and default, as the reference shows them (Markdown)
    meaning: str  # what it does (Markdown)
    why: str = ""

    @property
    def names(self) -> Tuple[str, ...]:
        """The last component of each path (what the YAML mapping holds)."""
        return tuple(p.rsplit(".", 1)[-1] for p in self.paths)


def key_names(keys: Sequence[Key], under: str) -> Tuple[str, ...]:
    """The names of the keys declared directly under mapping ``under`` ("" for the top, e.g.
    "job.requeue", "runtime.binds[]"), in the order declared."""
    prefix = f"{under}." if under else ""
    out = [p[len(prefix):] for k in keys for p in k.paths
           if p.startswith(prefix) and "." not in p[len(prefix):]]
    return tuple(dict.fromkeys(out))


# One value's bytes at most: half Linux's MAX_ARG_STRLEN (131072), so that NAME=value or an
# argument still fits beside the others.
MAX_VALUE_BYTES = 65536


class Reader:
    """Typed accessors that raise SpecError with the YAML path of the offending value."""

    def __init__(self, file: str) -> None:
        self.file = file

    def fail(self, path: str, message: str, value: Any = MISSING) -> SpecError:
        return SpecError(self.file, path, message, value)

    def mapping(self, path: str, value: Any, allowed: Sequence[str],
                required: Sequence[str] = ()) -> dict:
        if not isinstance(value, dict):
            raise self.fail(path, "must be a mapping", value)
        for key in value:
            if not isinstance(key, str) or key not in allowed:
                name = str(key)[:100]
                close = difflib.get_close_matches(name, allowed, n=1)
                hint = f" (did you mean '{close[0]}'?)" if close else \
                    f" (accepted: {', '.join(allowed)})"
                shown = repr(name) if len(name) <= 60 else repr(name[:57]) + "..."
                raise self.fail(path, f"unknown key {shown}{hint}")
        for key in required:
            if value.get(key) is None:
                raise self.fail(join(path, key), "is required")
        return value

    def string(self, path: str, value: Any, *, empty: bool = False, newline: bool = True) -> str:
        if isinstance(value, bool) or value is None:
            raise self.fail(path, "must be a string; quote it to keep the word as written "
                            "(YAML reads true/false/yes/no/on/off and null/~ unquoted)", value)
        if not isinstance(value, (str, int, float)):
            raise self.fail(path, "must be a string", value)
        text = value if isinstance(value, str) else getattr(value, "source", str(value))
        if not empty and text == "":
            raise self.fail(path, "must not be empty", value)
        if not newline and ("\n" in text or "\r" in text):
            raise self.fail(path, "must not contain a newline", value)
        if "\0" in text:
            raise self.fail(path, "must not contain a NUL character (a shell drops it, and "
                            "no argument or environment value can hold one)", value)
        size = len(text.encode("utf-8", "surrogatepass"))
        if size > MAX_VALUE_BYTES:
            raise self.fail(path, f"is {size} bytes long, over the limit of {MAX_VALUE_BYTES}"
                            " (Linux refuses an argument or environment value over 131072 "
                            "bytes, MAX_ARG_STRLEN, and all of them together over ARG_MAX): "
                            "put long data in a file and pass its path", value)
        return text

    def opt_string(self, path: str, value: Any, **kw: bool) -> Optional[str]:
        return None if value is None else self.string(path, value, **kw)

    def integer(self, path: str, value: Any, minimum: int, maximum: int = 1 << 31) -> int:
        if isinstance(value, str) and AMBIGUOUS_INT.match(value):
            raise self.fail(path, "is read differently by YAML 1.1 (010 is octal 8, 0b11 is 3, "
                            "1_0 is 10) and YAML 1.2 (10, and text): write a plain decimal "
                            "integer, without leading zeros, 0b, 0o or '_'", value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(path, "must be an integer", value)
        if not minimum <= value <= maximum:
            raise self.fail(path, f"must be between {minimum} and {maximum}", value)
        return value

    def boolean(self, path: str, value: Any) -> bool:
        if not isinstance(value, bool):
            raise self.fail(path, "must be true or false", value)
        return value

    def choice(self, path: str, value: Any, choices: Sequence[str]) -> str:
        if value not in choices:
            raise self.fail(path, f"must be one of {', '.join(choices)}", value)
        return cast(str, value)

    def strings(self, path: str, value: Any, **kw: bool) -> Tuple[str, ...]:
        if not isinstance(value, list):
            raise self.fail(path, "must be a list", value)
        return tuple(self.string(f"{path}[{i}]", v, **kw) for i, v in enumerate(value))

    def matching(self, path: str, value: Any, pattern: "re.Pattern[str]", what: str) -> str:
        text = self.string(path, value)
        if not pattern.match(text):
            raise self.fail(path, f"must be {what}", value)
        return text


def join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


# Spec values that may use the job's environment, and those that may not. Paths and program
# arguments (program, launch.command, runtime.image, runtime.binds, runtime.cache_dir,
# site.venv, site.venv_build.pip_options and .horovod.nccl_home) may write ``$NAME``,
# ``${NAME}`` or a leading ``~/``: they are expanded on the node when the script runs, where
# the job's environment is ($SCRATCH, $PROJECT, $HOME); ``$$`` is a literal '$' and every
# other character reaches the program unchanged. docs/guide/spec-values.md lists every key.
# ${ not followed by NAME}: a shell operator such as ${X:-default} that is not expanded here.
_BAD_BRACE = re.compile(r"(?<!\$)(?:\$\$)*\$\{(?![A-Za-z_][A-Za-z0-9_]*\})")
# Variables whose value differs between the tasks or nodes of a job. The spec's $VARs are
# expanded once, by the batch script on the first node, so every rank would get the first
# task's value (srun mode: --rank $SLURM_PROCID would be 0 everywhere): refused.
_PER_TASK = re.compile(r"(SLURM_(PROCID|LOCALID|NODEID|STEP_\w+|TASK_PID|GTIDS|CPU_BIND\w*"
                       r"|TOPOLOGY_ADDR\w*|LAUNCH_NODE_IPADDR)|SLURMD_NODENAME|RANK|LOCAL_RANK"
                       r"|GROUP_RANK|ROLE_RANK|LOCAL_WORLD_SIZE|WORLD_SIZE|CUDA_VISIBLE_DEVICES"
                       r"|OMPI_COMM_WORLD_\w+|PMI_\w+|PMIX_\w+|HOSTNAME)\Z")


def expandable(r: Reader, path: str, text: str) -> str:
    """A value expanded at run time: refuse the shell forms it does not expand, and the
    variables that differ from task to task."""
    if _BAD_BRACE.search(text):
        raise r.fail(path, "only $NAME and ${NAME} are expanded (at run time, on the node); "
                     "${NAME:-...} and other operators are not: write the value, or '$$' "
                     "for a literal '$'", text)
    for name in expansion_names(text):
        if _PER_TASK.match(name):
            raise r.fail(path, f"${name} differs between tasks and nodes, but the spec's "
                         "$VARs are expanded once, in the batch script on the first node: read "
                         f"{name} in your program (os.environ), or write '$${name}' for a "
                         "literal '$'", text)
    return text


def literal(r: Reader, path: str, value: Any) -> None:
    """A value written into the script literally: refuse '$' and a leading '~'."""
    if isinstance(value, str) and ("$" in value or value.startswith("~/")):
        raise r.fail(path, "is used literally: '$VAR' and '~' are not expanded here; write "
                     "the value itself (docs/guide/spec-values.md lists the keys that expand them)",
                     value)


__all__ = ["MAX_VALUE_BYTES", "Key", "Reader", "anchored", "expandable", "key_names", "literal",
           "load_yaml"]
