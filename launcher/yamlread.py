"""Reading YAML for the spec loader: no duplicate keys, and typed accessors that raise
SpecError with the YAML path of the offending value."""

from __future__ import annotations

import difflib
import re
from typing import Any, Optional, Sequence, Tuple, cast

import yaml

from launcher.model import MISSING, SpecError


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
                close = difflib.get_close_matches(str(key), allowed, n=1)
                hint = f" (did you mean '{close[0]}'?)" if close else \
                    f" (accepted: {', '.join(allowed)})"
                raise self.fail(path, f"unknown key {str(key)!r}{hint}")
        for key in required:
            if value.get(key) is None:
                raise self.fail(join(path, key), "is required")
        return value

    def string(self, path: str, value: Any, *, empty: bool = False, newline: bool = True) -> str:
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise self.fail(path, "must be a string", value)
        text = str(value)
        if not empty and text == "":
            raise self.fail(path, "must not be empty", value)
        if not newline and ("\n" in text or "\r" in text):
            raise self.fail(path, "must not contain a newline", value)
        return text

    def opt_string(self, path: str, value: Any, **kw: bool) -> Optional[str]:
        return None if value is None else self.string(path, value, **kw)

    def integer(self, path: str, value: Any, minimum: int, maximum: int = 1 << 31) -> int:
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


class DuplicateKeyLoader(yaml.SafeLoader):
    pass


def _no_duplicates(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict:
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)  # type: ignore[no-untyped-call]
        if isinstance(key, (str, int, float, bool)) and key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key) if isinstance(key, (str, int, float, bool)) else None
    return loader.construct_mapping(node)


DuplicateKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicates)


def load_yaml(text: str, file: str) -> Any:
    """Parse YAML text; malformed YAML or a duplicate key is a SpecError naming line and column."""
    try:
        return yaml.load(text, Loader=DuplicateKeyLoader)  # noqa: S506 (safe loader subclass)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise SpecError(file, "", f"{where}malformed YAML: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        raise SpecError(file, "", f"malformed YAML: {exc}") from None
