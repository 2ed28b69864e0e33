"""Shell text from argv lists: the one place where the composer quotes anything.

Where it sits: spec -> features/modes/runtimes (argv lists of tokens) -> **shell** -> text.
Renderers build argv lists to the very end. A token is either a literal ``str`` (always
quoted with ``shlex.quote``, so any byte sequence reaches the program unchanged) or a
deliberate run-time expansion built from ``Var`` parts (rendered inside double quotes,
literal parts escaped). ``resolve`` evaluates the same tokens in Python for the per-node
preview, so the preview and the script cannot disagree about what a token means.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Mapping, Sequence, Union

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


@dataclass(frozen=True)
class Var:
    """A shell variable expanded at run time; ``array=True`` means ``"${name[@]}"``."""

    name: str
    array: bool = False

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ValueError(f"not a shell variable name: {self.name!r}")


@dataclass(frozen=True)
class Word:
    """One argv token made of literal text and scalar variables, e.g. ``--x=${host}:${port}``."""

    parts: tuple[Union[str, Var], ...]

    def __post_init__(self) -> None:
        if any(isinstance(p, Var) and p.array for p in self.parts):
            raise ValueError("array variables must be whole tokens")


Token = Union[str, Var, Word]


@dataclass(frozen=True)
class Raw:
    """A constant shell statement written by the composer itself, never built from spec values."""

    text: str


@dataclass(frozen=True)
class Assign:
    """``[export ]name=value`` at batch scope, the value quoted like an argv token."""

    name: str
    value: Token
    export: bool = False

    def __post_init__(self) -> None:
        Var(self.name)  # validates the name

    def render(self) -> str:
        return f"{'export ' if self.export else ''}{self.name}={quote(self.value)}"


@dataclass(frozen=True)
class PathExport:
    """``export NAME="PRE${NAME:+:${NAME}}:APP"``: literal entries joined with ':' around the
    value NAME has when the line runs; the ':' next to it only when that value is non-empty
    (an empty PATH entry would mean the current directory)."""

    name: str
    prepend: tuple[str, ...] = ()
    append: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        Var(self.name)  # validates the name
        if not self.prepend and not self.append:
            raise ValueError(f"nothing to add to {self.name}")

    def render(self) -> str:
        n = self.name
        pre, app = (_dq_escape(":".join(entries)) for entries in (self.prepend, self.append))
        if pre:
            value = f"{pre}${{{n}:+:${{{n}}}}}" + (f":{app}" if app else "")
        else:
            value = f"${{{n}:+${{{n}}}:}}{app}"
        return f'export {n}="{value}"'


Statement = Union[Raw, Assign, PathExport]


def word(*parts: Union[str, Var]) -> Word:
    """Build a Word; adjacent literals are merged."""
    merged: list[Union[str, Var]] = []
    for part in parts:
        if isinstance(part, str) and merged and isinstance(merged[-1], str):
            merged[-1] = merged[-1] + part
        elif part != "":
            merged.append(part)
    return Word(tuple(merged))


# What a spec value may expand at run time: $NAME, ${NAME}, and $$ for a literal '$'.
_EXPANSION = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")


def expansion_parts(text: str) -> list[Union[str, Var]]:
    """A spec value that may use the job's environment, as Word parts: ``$NAME`` and
    ``${NAME}`` become variables, ``$$`` a literal '$', a leading ``~/`` ``$HOME/``; everything
    else (every other '$', a lone ``~``) stays literal text."""
    parts: list[Union[str, Var]] = []
    if text.startswith("~/"):
        parts.append(Var("HOME"))
        text = text[1:]
    pos = 0
    for m in _EXPANSION.finditer(text):
        parts.append(text[pos:m.start()])
        parts.append("$" if m[0] == "$$" else Var(m[1] or m[2]))
        pos = m.end()
    parts.append(text[pos:])
    return list(word(*parts).parts)


def expansion(text: str) -> Token:
    """The token for a spec value that may use the job's environment (see expansion_parts):
    the plain literal when it names no variable, so such values render as before."""
    return literal_or_word(*expansion_parts(text))


def literal_or_word(*parts: Union[str, Var]) -> Token:
    """A Word when a part is a variable, else the plain literal (quoted as any literal)."""
    merged = word(*parts)
    if all(isinstance(p, str) for p in merged.parts):
        return "".join(str(p) for p in merged.parts)
    return merged


def expansion_names(text: str) -> list[str]:
    """The variables a spec value expands, in order."""
    return [p.name for p in expansion_parts(text) if isinstance(p, Var)]


def anchored(path: str) -> bool:
    """Absolute, or starting with a variable or ~ (absolute once expanded, as $SCRATCH,
    $PROJECT and $HOME are)."""
    first = expansion_parts(path)[:1]
    return bool(first) and (isinstance(first[0], Var) or first[0].startswith("/"))


def require_vars(names: Sequence[str]) -> Raw:
    """Stop the script with one clear line when a variable the spec expands is unset here
    (under ``set -u`` bash would only say 'NAME: unbound variable' at the first use)."""
    for name in names:
        Var(name)  # validates: only names reach this line
    return Raw(f"for name in {' '.join(names)}; do\n"
               '    if [ -z "${!name+set}" ]; then echo "jsc-compose: the spec uses \\$$name, '
               'which is not set on $(hostname) (it is expanded on the node at run time)" >&2; '
               "exit 1; fi\n"
               "done")


def _dq_escape(text: str) -> str:
    # Inside double quotes only these four characters are special to bash.
    return re.sub(r'([\\"$`])', r"\\\1", text)


def quote(token: Token) -> str:
    """Shell text for one token: literals via shlex.quote, variables inside double quotes."""
    if isinstance(token, str):
        return shlex.quote(token)
    if isinstance(token, Var):
        return f'"${{{token.name}[@]}}"' if token.array else f'"${{{token.name}}}"'
    inner = "".join(
        f"${{{p.name}}}" if isinstance(p, Var) else _dq_escape(p) for p in token.parts
    )
    return f'"{inner}"'


def join(argv: Sequence[Token], width: int = 88, indent: str = "    ") -> str:
    """One command line, wrapped at token boundaries with backslash continuations."""
    lines: list[str] = []
    current = ""
    for text in (quote(t) for t in argv):
        if current and len(current) + 1 + len(text) > width:
            lines.append(current + " \\")
            current = indent + text
        else:
            current = f"{current} {text}" if current else text
    lines.append(current)
    return "\n".join(lines)


def collect_env(array: str, patterns: Sequence[str], flag: str = "") -> Raw:
    """Fill ``array`` at run time with the names (optionally each after ``flag``) of the
    current environment variables matching ``patterns``. Values are never written."""
    Var(array)
    add = f"{flag} \"$name\"" if flag else '"$name"'
    return Raw(f"{array}=()\n"
               f"for name in $(compgen -e); do\n"
               f"    case \"$name\" in {case_patterns(patterns)}) {array}+=({add}) ;; esac\n"
               f"done")


def render_statement(statement: Statement) -> str:
    return statement.text if isinstance(statement, Raw) else statement.render()


def case_patterns(names: Sequence[str]) -> str:
    """``A|B_*`` for a bash ``case``: names, or prefixes ending in one ``*`` (validated)."""
    for name in names:
        if not is_name(name.rstrip("*")) or name.count("*") > 1 or "*" in name[:-1]:
            raise ValueError(f"not a variable name or prefix pattern: {name!r}")
    return "|".join(names)


Values = Mapping[str, Union[str, Sequence[str]]]


def resolve(argv: Sequence[Token], values: Values) -> list[str]:
    """The argv a task would receive, given run-time variable values (for the preview).

    A variable without a value stays as its shell text, e.g. ``${enroot_name}``."""
    out: list[str] = []
    for token in argv:
        if isinstance(token, str):
            out.append(token)
        elif isinstance(token, Var) and token.name not in values:
            out.append(f"${{{token.name}[@]}}" if token.array else f"${{{token.name}}}")
        elif isinstance(token, Var):
            value = values[token.name]
            if token.array:
                out.extend([value] if isinstance(value, str) else list(value))
            else:
                out.append(value if isinstance(value, str) else " ".join(value))
        else:
            out.append("".join(p if isinstance(p, str) else str(values.get(p.name, f"${{{p.name}}}"))
                               for p in token.parts))
    return out


def is_name(text: str) -> bool:
    """True for a valid shell/environment variable name."""
    return bool(_NAME.match(text))


_SBATCH_SAFE = re.compile(r"[A-Za-z0-9_%.,:/=+@-]+\Z")


def sbatch_quote(value: str) -> str:
    """Quote a value for an ``#SBATCH`` line the way sbatch's own parser reads it.

    sbatch (src/sbatch/opt.c, _get_argument) groups characters with ' or " quotes, takes a
    backslash as escaping the next character everywhere, and treats an unquoted ``#`` as a
    comment. No shell ever sees these lines, so shlex.quote would be wrong here. Newlines
    cannot be represented; the spec loader rejects them before rendering.
    """
    if "\n" in value or "\r" in value:
        raise ValueError(f"#SBATCH values cannot contain a newline: {value!r}")
    if _SBATCH_SAFE.match(value):
        return value
    return '"' + re.sub(r'([\\"])', r"\\\1", value) + '"'
