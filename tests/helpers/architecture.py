"""The shape of launcher/, measured: modules, the imports between them, layers, cycles, and
where a spec key is read. `make architecture` (or ``python3 tests/helpers/architecture.py
[ROOT]``) prints the figures that docs/development/architecture.md records; ring 1
(tests/unit/test_layout.py) holds the rules they must keep.

Counted the way issue 35 counts them: a *unit* is a file at launcher/'s root or a package
directly under it, the package counted as one (``launcher.modes`` stands for every module in
launcher/modes/), and launcher/__init__.py (the package's own face, ``launcher``) apart. An
import between two units is one edge however many modules or names it involves; an import
of ``launcher.a.b`` also runs ``launcher.a`` first, and that counts too. Imports anywhere in a
file count (module level, inside functions, guarded), relative ones resolved.

Standard library only, and nothing of launcher/ is imported: the figures of another checkout
(``git worktree add /tmp/old 04322e7``) are measured the same way.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path
from typing import Dict, Iterable, List, Set

ROOT = Path(__file__).resolve().parents[2]


def module_names(root: Path = ROOT) -> Dict[str, Path]:
    """Every module under launcher/ by dotted name (a package by its own name)."""
    out = {}
    for path in sorted((root / "launcher").rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def ancestors(name: str) -> List[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def imports(name: str, modules: Dict[str, Path]) -> Set[str]:
    """The launcher modules ``name`` imports anywhere in its text (module level, functions,
    guarded blocks), with the packages an import runs on the way (``import launcher.a.b``
    runs ``launcher.a`` first), except ``name``'s own packages (already running)."""
    is_package = modules[name].name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    targets: Set[str] = set()
    for node in ast.walk(ast.parse(modules[name].read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for alias in node.names:  # `from pkg import submodule` imports the submodule
                full = f"{module}.{alias.name}"
                targets.add(full if full in modules else module)
    out = set()
    for target in targets:
        if target.split(".")[0] != "launcher":
            continue
        if target not in modules:
            raise LookupError(f"{name} imports {target}, which is not in launcher/")
        out.add(target)
        out.update(a for a in ancestors(target) if a not in ancestors(name))
    out.discard(name)
    return out


def graph(root: Path = ROOT) -> Dict[str, Set[str]]:
    """Module -> the launcher modules it imports."""
    modules = module_names(root)
    return {name: imports(name, modules) for name in modules}


def unit(module: str) -> str:
    """``launcher.modes.ray`` -> ``launcher.modes``; ``launcher`` stays itself."""
    return ".".join(module.split(".")[:2])


def unit_graph(modules: Dict[str, Set[str]]) -> Dict[str, Set[str]]:
    out: Dict[str, Set[str]] = {unit(m): set() for m in modules}
    for source, targets in modules.items():
        out[unit(source)].update(unit(t) for t in targets if unit(t) != unit(source))
    return out


def cycles(graph_: Dict[str, Set[str]]) -> List[List[str]]:
    """The strongly connected components with more than one node (Tarjan), sorted."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    out: List[List[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph_[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph_):
        if v not in index:
            visit(v)
    return sorted(out)


def floors(graph_: Dict[str, Set[str]]) -> Dict[str, int]:
    """Each node's floor in an acyclic graph: 0 for one that imports nothing, else one above
    the highest floor it imports (the longest import chain below it)."""
    memo: Dict[str, int] = {}

    def floor(v: str) -> int:
        if v not in memo:
            memo[v] = 1 + max((floor(w) for w in graph_[v]), default=-1)
        return memo[v]

    for v in graph_:
        floor(v)
    return memo


def _code_strings_and_names(tree: ast.AST) -> Iterable[str]:
    """Attribute names and string constants of a module's code (docstrings left out)."""
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = getattr(node, "body", [])
            if body and isinstance(body[0], ast.Expr) and isinstance(
                    getattr(body[0], "value", None), ast.Constant):
                docstrings.add(id(body[0].value))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            yield node.attr
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and id(node) not in docstrings:
            yield node.value


def readers(key: str, root: Path = ROOT) -> List[str]:
    """The composer modules whose code names spec key ``key`` (``launch.hang_timeout``): its
    field as an attribute (``launch.hang_timeout``), or the key's text in a string (the
    loader's ``m.get("hang_timeout")``, an error's path). Comments and docstrings do not
    count; the node and task sides are not the composer (they read the job's text)."""
    field = key.rsplit(".", 1)[-1]
    word = re.compile(rf"(?<![A-Za-z0-9_]){re.escape(field)}(?![A-Za-z0-9_])")
    out = []
    for name, path in module_names(root).items():
        if name.startswith(("launcher.node", "launcher.task")):
            continue
        found = any(s == field or word.search(s) and (key in s or s == field)
                    for s in _code_strings_and_names(ast.parse(path.read_text(encoding="utf-8"))))
        if found:
            out.append(name)
    return sorted(out)


def node_files(word_: str, root: Path = ROOT) -> List[str]:
    """The node- and task-side files (any language) whose text names ``word_``."""
    out = []
    for folder in ("node", "task"):
        for path in sorted((root / "launcher" / folder).rglob("*")):
            if path.is_file() and path.suffix in (".py", ".sh") and \
                    word_ in path.read_text(encoding="utf-8", errors="replace"):
                out.append(str(path.relative_to(root)))
    return out


def figures(root: Path = ROOT) -> Dict[str, object]:
    modules = graph(root)
    units = unit_graph(modules)
    return {
        "modules": len(modules),
        "module_imports": sum(len(v) for v in modules.values()),
        "units": len(units),
        "unit_imports": sum(len(v) for v in units.values()),
        "unit_cycles": cycles(units),
        "module_cycles": cycles(modules),
        "floors": floors(units) if not cycles(units) else {},
        "hang_timeout_readers": readers("launch.hang_timeout", root),
        "image_readers": readers("runtime.image", root),
    }


def report(root: Path = ROOT) -> str:
    f = figures(root)
    floors_ = f["floors"]
    assert isinstance(floors_, dict)
    lines = [f"launcher/ at {root}",
             f"units (root files, packages as one, launcher/__init__ apart): {f['units']}",
             f"imports between units: {f['unit_imports']}",
             f"modules (every .py): {f['modules']}, imports between them: {f['module_imports']}",
             f"import cycles: units {len(f['unit_cycles'])}, "  # type: ignore[arg-type]
             f"modules {len(f['module_cycles'])}"]  # type: ignore[arg-type]
    if floors_:
        lines.append(f"floors (longest import chain between units): {max(floors_.values()) + 1}")
        for level in sorted(set(floors_.values()), reverse=True):
            names = sorted(u.replace("launcher.", "") for u, v in floors_.items() if v == level)
            lines.append(f"  {level}: {' '.join(names)}")
    for key, readers_ in (("launch.hang_timeout", f["hang_timeout_readers"]),
                          ("runtime.image", f["image_readers"])):
        assert isinstance(readers_, list)
        lines.append(f"composer modules that name {key}: {len(readers_)}: "
                     f"{' '.join(r.replace('launcher.', '') for r in readers_)}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(report(Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else ROOT))
