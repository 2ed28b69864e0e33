"""Dockerfile text -> instructions, and Docker's word rules (quotes, escapes, ``$VAR``).

Where it sits: the first step of ``launcher.dockerfile`` (text -> ``Instruction`` list ->
stages -> definition text). It follows Docker's reference: a backslash at a line's end
continues it, comment lines inside a continuation are dropped, ``--flag=value`` words lead
FROM/COPY/ADD/RUN, a JSON array is the exec form; variables are ``$NAME``, ``${NAME}``,
``${NAME:-word}`` and ``${NAME:+word}`` (and without the colon). What it cannot carry over
it refuses with the line number: heredocs, another escape character.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import List, Mapping, Optional, Sequence, Tuple, Union

FLAGGED = ("FROM", "COPY", "ADD", "RUN")
_DIRECTIVE = re.compile(r"#\s*([a-zA-Z]+)\s*=\s*(.*?)\s*$")
_FLAG = re.compile(r"(?:\s|\\\n)*(--[A-Za-z][A-Za-z0-9-]*(?:=\S*)?)")
_HEREDOC = re.compile(r"<<-?\s*[\"']?[A-Za-z_]")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class DockerfileError(ValueError):
    """A Dockerfile that cannot be converted; str() is the one line the CLI prints."""


@dataclass(frozen=True)
class Instruction:
    """One instruction: ``text`` is its arguments after the flags with continuations joined
    (what Docker parses), ``body`` the same as written, line breaks kept (what RUN's shell
    gets: a backslash-newline continues a line for sh as it does for Docker)."""

    line: int
    keyword: str
    flags: Tuple[Tuple[str, str], ...]
    text: str
    body: str

    def flag(self, name: str) -> Optional[str]:
        return dict(self.flags).get(name)

    def where(self, source: str) -> str:
        return f"{source}:{self.line}: {self.keyword}"


@dataclass(frozen=True)
class Ref:
    """A variable the Dockerfile does not set (the base image's, or the build's shell's):
    ``expr`` is its shell spelling, expanded at build time."""

    expr: str
    name: str


Segment = Union[str, Ref]


def read_instructions(text: str, source: str = "Dockerfile") -> List[Instruction]:
    """The instructions of a Dockerfile, in order; DockerfileError for what is not Docker's
    syntax or cannot carry over."""
    lines = text.splitlines()
    out: List[Instruction] = []
    i, header = 0, True
    while i < len(lines):
        stripped = lines[i].strip()
        if not stripped or stripped.startswith("#"):
            directive = _DIRECTIVE.match(stripped) if header else None
            if directive and directive.group(1).lower() == "escape" and directive.group(2) != "\\":
                raise DockerfileError(f"{source}:{i + 1}: escape={directive.group(2)}: only "
                                      "the backslash escape is supported")
            header = header and bool(directive)
            i += 1
            continue
        header = False
        start, parts = i, [lines[i]]
        while parts[-1].rstrip().endswith("\\") and i + 1 < len(lines):
            i += 1
            nxt = lines[i].strip()
            if nxt and not nxt.startswith("#"):  # Docker drops these inside a continuation
                parts.append(lines[i])
        i += 1
        out.append(_instruction(start + 1, parts, source))
    return out


def _instruction(line: int, parts: List[str], source: str) -> Instruction:
    keyword, rest = re.match(r"(\S+)\s*(.*)$", parts[0].strip(), re.S).groups()
    keyword = keyword.upper()
    kept = [rest] + parts[1:]
    if kept[-1].rstrip().endswith("\\"):  # a continuation at the end of the file
        kept[-1] = kept[-1].rstrip()[:-1]
    body = "\n".join(p.rstrip() for p in kept).strip()
    flags: List[Tuple[str, str]] = []
    if keyword in FLAGGED:
        while True:
            m = _FLAG.match(body)
            if not m:
                break
            name, _, value = m.group(1)[2:].partition("=")
            flags.append((name, value))
            body = body[m.end():].lstrip()
    text = "".join(p.rstrip()[:-1] if p.rstrip().endswith("\\") else p
                   for p in body.split("\n")).strip()
    if keyword in ("RUN", "COPY", "ADD") and _HEREDOC.search(text) and not text.startswith("["):
        raise DockerfileError(f"{source}:{line}: {keyword} with a heredoc (<<): not supported; "
                              "put the script or file next to the Dockerfile and COPY it")
    return Instruction(line, keyword, tuple(flags), text, body)


def exec_form(text: str) -> Optional[List[str]]:
    """The JSON array of an exec-form instruction, or None for the shell form (as Docker:
    text that is not a JSON array of strings is the shell form)."""
    if not text.startswith("["):
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value
    return None


def words(text: str, values: Mapping[str, str], split: bool = True) -> List[List[Segment]]:
    """Docker's words: quotes removed, backslash escapes, variables from ``values`` replaced
    and the others kept as Ref; split at unquoted blanks unless ``split`` is False."""
    out: List[List[Segment]] = []
    word: List[Segment] = []
    started = False
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in " \t\n" and split:
            if started:
                out.append(_join(word))
            word, started = [], False
            i += 1
            continue
        started = True
        if c == "'":
            end = text.find("'", i + 1)
            end = n if end < 0 else end
            word.append(text[i + 1:end])
            i = end + 1
        elif c == '"':
            i += 1
            while i < n and text[i] != '"':
                if text[i] == "\\" and i + 1 < n and text[i + 1] in '"\\$':
                    word.append(text[i + 1])
                    i += 2
                elif text[i] == "$":
                    seg, i = _variable(text, i, values)
                    word.append(seg)
                else:
                    word.append(text[i])
                    i += 1
            i += 1
        elif c == "\\" and i + 1 < n:
            word.append(text[i + 1])
            i += 2
        elif c == "$":
            seg, i = _variable(text, i, values)
            word.append(seg)
        else:
            word.append(c)
            i += 1
    if started:
        out.append(_join(word))
    return out


def _join(word: Sequence[Segment]) -> List[Segment]:
    joined: List[Segment] = []
    for seg in word:
        if isinstance(seg, str) and joined and isinstance(joined[-1], str):
            joined[-1] += seg
        elif seg != "":
            joined.append(seg)
    return joined or [""]


def _variable(text: str, i: int, values: Mapping[str, str]) -> Tuple[Segment, int]:
    """The variable at text[i] == '$': its value, or a Ref; and the index after it."""
    if i + 1 < len(text) and text[i + 1] == "{":
        end = text.find("}", i + 2)
        if end < 0:
            return text[i:], len(text)
        inner = text[i + 2:end]
        m = re.match(r"([A-Za-z_][A-Za-z0-9_]*)(:?[-+])?(.*)$", inner, re.S)
        if not m or (m.group(3) and not m.group(2)):
            raise DockerfileError(f"unsupported substitution ${{{inner}}}: use $NAME, "
                                  "${NAME}, ${NAME:-default} or ${NAME:+alternative}")
        name, op, word = m.group(1), m.group(2), m.group(3)
        expr = text[i:end + 1]
        if name not in values:
            return Ref(expr, name), end + 1
        value = values[name]
        if op in (":-", "-"):
            value = value if (value or op == "-") else word
        elif op in (":+", "+"):
            value = word if (value or op == "+") else ""
        return value, end + 1
    m = _NAME.match(text, i + 1)
    if not m:
        return "$", i + 1
    name = m.group(0)
    if name not in values:
        return Ref("${%s}" % name, name), m.end()
    return values[name], m.end()


def plain(word: Sequence[Segment], what: str) -> str:
    """A word whose variables the Dockerfile sets (paths, FROM): its text, else one line."""
    refs = [seg.expr for seg in word if isinstance(seg, Ref)]
    if refs:
        raise DockerfileError(f"{what} uses {refs[0]}, which the Dockerfile does not set (the "
                              "base image's environment is not known before the build): "
                              "write the value, or set it with ARG or ENV first")
    return "".join(str(seg) for seg in word)


def shell_word(word: Sequence[Segment]) -> str:
    """A word as one double-quoted shell word: literal text escaped, unknown variables left
    for the build's shell (which has the base image's environment) to expand."""
    out = ['"']
    for seg in word:
        if isinstance(seg, Ref):
            out.append(seg.expr)
        else:
            out.append(re.sub(r'(["\\$`])', r"\\\1", seg))
    out.append('"')
    return "".join(out)


def key_values(text: str, values: Mapping[str, str], what: str,
               legacy: bool = True) -> List[Tuple[str, List[Segment]]]:
    """ENV/LABEL/ARG pairs: ``K=V ...``, or Docker's older ``K V`` (value = the rest)."""
    first = text.split(None, 1)
    if legacy and first and "=" not in first[0]:
        if len(first) < 2:
            raise DockerfileError(f"{what}: expected NAME=VALUE, got {text!r}")
        rest = words(first[1], values, split=False)
        return [(first[0], rest[0] if rest else [""])]
    pairs: List[Tuple[str, List[Segment]]] = []
    for word in words(text, values):
        head = word[0] if word and isinstance(word[0], str) else ""
        if "=" not in head:
            raise DockerfileError(f"{what}: expected NAME=VALUE, got {text!r}")
        key, _, first_value = head.partition("=")
        value = _join([first_value, *word[1:]])
        pairs.append((key, value))
    return pairs

