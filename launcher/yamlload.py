"""Parsing a spec's YAML text into Python values, in bounded time and memory.

Where it sits: the first step of spec loading (launcher.spec -> launcher.yamlread's
``load_yaml`` -> here). Whatever the text, parsing ends in a value or one SpecError line.

Bounds (a spec is a few dozen keys; every limit is far above what a real one uses):

- :data:`MAX_SPEC_BYTES` of text: PyYAML is pure Python, about a second per MB.
- :data:`MAX_DEPTH` levels of nesting: PyYAML composes recursively, so 1,000 nested lists
  would end in RecursionError.
- :data:`MAX_NODES` values and :data:`MAX_EXPANDED_BYTES` characters of them, counting every
  alias as the values it stands for: an alias costs nothing to compose, but nine aliases of
  nine aliases ... ("billion laughs") expand to millions of values in every later walk
  (validation, messages, the script's arguments). A recursive alias (``&a [*a]``) is refused.

Numbers follow YAML 1.2's core schema where YAML 1.1 (PyYAML's) reads them otherwise:
``24:00:00`` is text, not the base-60 integer 86400, and a date stays text. Integers are
plain decimal (``10``, ``-3``) or hexadecimal (``0x1f``), which both versions read alike;
the forms they read differently (``010``: octal 8 in 1.1, 10 in 1.2; ``0b11``, ``0o17``,
``1_000``) stay text, which launcher.yamlread's ``Reader.integer`` refuses as ambiguous
and a string field (a program argument) keeps as written. Numbers keep the text the user
wrote (``0.001``, ``1e-3``) for the same reason.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Set, Tuple

import yaml

from launcher.model import SpecError

MAX_SPEC_BYTES = 256 * 1024
MAX_DEPTH = 32
MAX_NODES = 10_000
MAX_EXPANDED_BYTES = 1 << 20  # the text of all values, aliases expanded


class SourceInt(int):
    """An integer that remembers how it was written (``0x1f``)."""

    source: str


class SourceFloat(float):
    """A float that remembers how it was written (``0.001``, ``1.0``, ``.5``)."""

    source: str


# Longer numbers stay text: int() refuses more than 4300 digits (CPython's
# int_max_str_digits), and no spec value is a 40-digit number.
_MAX_DIGITS = 40


def _number(kind: type, base: Any, form: "re.Pattern[str]") -> Any:
    def construct(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> Any:
        if len(node.value) > _MAX_DIGITS:
            return node.value
        if not form.match(node.value):  # an explicit tag: !!int abc
            raise yaml.constructor.ConstructorError(
                None, None, f"not a number: {short(node.value)}", node.start_mark)
        out = kind(base(loader, node))
        out.source = node.value
        return out
    return construct


# YAML 1.2 core: decimal and hexadecimal integers; floats with a dot (1.1's and 1.2's
# common ground, so 1e3 stays text as before); no base 60, no timestamps, no '_'.
INT = re.compile(r"[-+]?(?:0|[1-9][0-9]*)\Z|0x[0-9a-fA-F]+\Z")
_FLOAT = re.compile(r"[-+]?[0-9]+\.[0-9]*(?:[eE][-+][0-9]+)?\Z"
                    r"|[-+]?\.[0-9]+(?:[eE][-+][0-9]+)?\Z|[-+]?\.(?:inf|Inf|INF)\Z"
                    r"|\.(?:nan|NaN|NAN)\Z")
# What YAML 1.1 reads as an integer and YAML 1.2 does not, or as another one.
AMBIGUOUS_INT = re.compile(r"[-+]?(?:0[0-9_]+|0b[01_]+|0o[0-7_]+|0x[0-9a-fA-F_]*_[0-9a-fA-F_]*"
                           r"|[1-9][0-9_]*_[0-9_]*)\Z")
_NUMBER_TAGS = ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float",
                "tag:yaml.org,2002:timestamp")


class BoundError(yaml.composer.ComposerError):
    """A bound passed (not malformed YAML)."""


class SpecLoader(yaml.SafeLoader):
    """PyYAML's safe loader with YAML 1.2's numbers, no duplicate keys, and the bounds."""

    yaml_implicit_resolvers = {
        first: [(tag, rx) for tag, rx in resolvers if tag not in _NUMBER_TAGS]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.depth = 0
        self.composed = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):  # type: ignore[no-untyped-call]
            return super().compose_node(parent, index)  # type: ignore[no-untyped-call]
        mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
        self.depth += 1
        self.composed += 1
        if self.depth > MAX_DEPTH:
            raise BoundError(
                None, None, f"nested deeper than {MAX_DEPTH} levels (the limit)", mark)
        if self.composed > MAX_NODES:
            raise BoundError(
                None, None, f"more than {MAX_NODES} values (the limit)", mark)
        try:
            return super().compose_node(parent, index)  # type: ignore[no-untyped-call]
        finally:
            self.depth -= 1

    def compose_document(self) -> Any:
        node = super().compose_document()  # type: ignore[no-untyped-call]
        size = expanded_size(node, MAX_NODES)
        if size > MAX_NODES:
            raise BoundError(
                None, None, f"its aliases expand to more than {MAX_NODES} values or "
                f"{MAX_EXPANDED_BYTES} characters (the limits)",
                node.start_mark)
        return node


SpecLoader.add_implicit_resolver("tag:yaml.org,2002:int", INT, list("-+0123456789"))
SpecLoader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT, list("-+0123456789."))
SpecLoader.add_constructor("tag:yaml.org,2002:timestamp",  # !!timestamp x: a date stays text
                           yaml.SafeLoader.construct_yaml_str)
SpecLoader.add_constructor(
    "tag:yaml.org,2002:int", _number(SourceInt, yaml.SafeLoader.construct_yaml_int, INT))
SpecLoader.add_constructor(
    "tag:yaml.org,2002:float", _number(SourceFloat, yaml.SafeLoader.construct_yaml_float,
                                       _FLOAT))


def _children(node: yaml.Node) -> List[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def expanded_size(root: yaml.Node, limit: int, text_limit: int = MAX_EXPANDED_BYTES) -> int:
    """How many values ``root`` stands for with every alias expanded, counted without
    expanding (each node once); stops above ``limit``. Text counts too: a value of
    ``text_limit`` characters or more with its aliases expanded counts as ``limit + 1`` (ten
    thousand aliases of a 60 KB value would be 600 MB of arguments). A node that contains
    itself (a recursive alias) is a ComposerError."""
    size: Dict[int, Tuple[int, int]] = {}  # id -> (values, characters)
    open_: Set[int] = set()
    stack: List[Tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            open_.discard(key)
            own = len(node.value) if isinstance(node, yaml.ScalarNode) else 0
            parts = [size[id(c)] for c in _children(node)]
            size[key] = (1 + sum(p[0] for p in parts), own + sum(p[1] for p in parts))
            if size[key][0] > limit or size[key][1] >= text_limit:
                return limit + 1 if size[key][0] <= limit else size[key][0]
            continue
        if key in size:
            continue
        if key in open_:
            raise yaml.composer.ComposerError(None, None, "an alias refers to a value that "
                                              "contains it (a recursive alias)", node.start_mark)
        open_.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in _children(node) if id(c) not in size)
    return size[id(root)][0]


def _no_duplicates(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict:
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)  # type: ignore[no-untyped-call]
        if isinstance(key, (str, int, float, bool)) and key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {short(key)}", key_node.start_mark)
        seen.add(key) if isinstance(key, (str, int, float, bool)) else None
    return loader.construct_mapping(node)


SpecLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicates)


def short(value: Any) -> str:
    """repr of a key, at most 60 characters, without building a longer one."""
    text = repr(value[:61]) if isinstance(value, str) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def load_yaml(text: str, file: str) -> Any:
    """Parse YAML text; malformed YAML, a duplicate key or a bound passed is a SpecError
    naming line and column."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_SPEC_BYTES:
        raise SpecError(file, "", f"a spec is at most {MAX_SPEC_BYTES} bytes (the limit), this "
                        f"one has {size}")
    try:
        return yaml.load(text, Loader=SpecLoader)  # noqa: S506 (safe loader subclass)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        what = " ".join(str(exc.problem or exc.context).split())
        kind = "" if isinstance(exc, BoundError) else "malformed YAML: "
        raise SpecError(file, "", f"{where}{kind}{what}") from None
    except yaml.YAMLError as exc:
        raise SpecError(file, "", f"malformed YAML: {' '.join(str(exc).split())}") from None
    except (ValueError, TypeError, IndexError, KeyError, AttributeError,
            OverflowError) as exc:
        # PyYAML's constructors for explicit tags (!!timestamp x, !!binary ...) raise these
        raise SpecError(file, "", f"malformed YAML: a tagged value cannot be read "
                        f"({type(exc).__name__})") from None


__all__ = ["AMBIGUOUS_INT", "BoundError", "INT", "MAX_DEPTH", "MAX_EXPANDED_BYTES", "MAX_NODES",
           "MAX_SPEC_BYTES", "SourceFloat", "SourceInt", "SpecLoader", "expanded_size",
           "load_yaml"]
