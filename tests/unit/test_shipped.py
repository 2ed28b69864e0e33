"""Ring 1: the contract of code shipped to compute nodes as source (launcher/shipped.py,
docs/development/shipped-code.md), checked on every module of every bundle.

A shipped module runs under the node python3 (RHEL 8: 3.6) with nothing but the standard
library, concatenated with the other modules of its bundle into one ``python3 -c`` script.
"""

from __future__ import annotations

import ast
import sys
from typing import Dict, List, Set

import pytest

from launcher import shipped


FILES = sorted({f for files, _ in shipped.BUNDLES.values() for f in files})
# Standard-library names and keywords that appeared after Python 3.6.
NEWER_MODULES = {"dataclasses", "contextvars", "importlib.metadata", "importlib.resources",
                 "zoneinfo", "graphlib", "tomllib"}
NEWER_ATTRIBUTES = {"monotonic_ns", "time_ns", "perf_counter_ns", "fromisoformat",
                    "removeprefix", "removesuffix", "nullcontext", "isascii", "cached_property",
                    "is_relative_to", "get_running_loop", "create_task", "shlex_join"}
NEWER_KEYWORDS = {"capture_output", "text"}  # subprocess.run, 3.7


def tree(path: str) -> ast.Module:
    return ast.parse((shipped.ROOT / path).read_text(encoding="utf-8"), path,
                     feature_version=(3, 6))


def kit_imports(mod: ast.Module) -> List[ast.ImportFrom]:
    return [n for n in mod.body if isinstance(n, ast.ImportFrom)
            and (n.module or "").split(".")[0] == shipped.KIT]


def defined(mod: ast.Module) -> Set[str]:
    """Top-level names a module defines (imports aside)."""
    out: Set[str] = set()
    for node in mod.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        out.add(n.id)
    return out


@pytest.mark.parametrize("path", FILES)
def test_imports_only_the_standard_library_or_its_bundle(path):
    mod = tree(path)
    for node in ast.walk(mod):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}:{node.lineno}: relative import"
            assert node.module != "__future__", f"{path}:{node.lineno}: __future__ import"
            names = [node.module or ""]
        else:
            continue
        for name in names:
            if name.split(".")[0] == shipped.KIT:
                assert node in mod.body, f"{path}:{node.lineno}: kit import not at top level"
                continue
            assert name.split(".")[0] in sys.stdlib_module_names, \
                f"{path}:{node.lineno}: {name} is not in the standard library"
            assert name not in NEWER_MODULES, f"{path}:{node.lineno}: {name} is newer than 3.6"


@pytest.mark.parametrize("path", FILES)
def test_no_api_newer_than_python_3_6(path):
    for node in ast.walk(tree(path)):
        if isinstance(node, ast.Attribute):
            assert node.attr not in NEWER_ATTRIBUTES, f"{path}:{node.lineno}: .{node.attr}"
        if isinstance(node, ast.Call):
            bad = {k.arg for k in node.keywords} & NEWER_KEYWORDS
            assert not bad, f"{path}:{node.lineno}: keyword {bad} (Python 3.7+)"


@pytest.mark.parametrize("path", FILES)
def test_nothing_runs_on_import_but_definitions(path):
    """The entry point is appended by shipped.source; a module runs no code of its own."""
    allowed = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef, ast.Assign,
               ast.AnnAssign)
    for i, node in enumerate(tree(path).body):
        docstring = i == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        assert docstring or isinstance(node, allowed), \
            f"{path}:{node.lineno}: {type(node).__name__} at top level"


@pytest.mark.parametrize("name", sorted(shipped.BUNDLES))
def test_bundle_imports_come_from_earlier_files_and_names_are_unique(name):
    files, entry = shipped.BUNDLES[name]
    seen: Dict[str, str] = {}  # name -> the file defining it
    for path in files:
        mod = tree(path)
        for imp in kit_imports(mod):
            source = imp.module.replace(".", "/")[len(shipped.KIT) + 1:] + ".py"
            assert source in files[:files.index(path)], \
                f"{path}: imports {imp.module}, which is not earlier in bundle {name}"
            for alias in imp.names:
                assert alias.asname is None and seen.get(alias.name) == source, \
                    f"{path}: {alias.name} is not a top-level name of {source}"
        for top in defined(mod):
            assert top not in seen, f"{top} is defined in both {seen[top]} and {path}"
            seen[top] = path
    assert entry in seen, f"bundle {name}: no entry function {entry}"


@pytest.mark.parametrize("name", sorted(shipped.BUNDLES))
def test_bundle_text_parses_as_python_3_6_without_kit_imports(name):
    text = shipped.source(name)
    mod = ast.parse(text, feature_version=(3, 6))
    assert not kit_imports(mod)
    assert not [n for n in ast.walk(mod) if isinstance(n, ast.ImportFrom)
                and (n.module or "").startswith(shipped.KIT)]
    compile(text, f"<bundle {name}>", "exec")


def test_net_bundle_has_no_single_quote():
    """Task scripts embed it between single quotes: the jobscript shows it verbatim."""
    assert "'" not in shipped.source("net")
