"""Ring 1: where code runs (docs/development/index.md#where-code-runs), and no import cycle.

NODE_SIDE below is the one list of what runs on the compute nodes. A package stands for itself
and every module in it: a new module under launcher/node/ or launcher/task/ is node-side with no
change here; one elsewhere is one line here and one name in the docs' table. Every other module under launcher/ is the login node's composer
(spec, modes, runtimes, rendering, the CLI). The rule: node-side code never imports composer
code nor PyYAML; the node side may import the package roots above it (``launcher``),
which are checked by the same rule.

Checked three ways: each node-side module imported in a fresh interpreter loads no composer
module and no yaml; the static imports of the node side (module level and inside functions,
where a lazy import hides from the first check) stay on the node side; and the static import
graph of launcher/ has no cycle. The docs' table names the same node side.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Set

import pytest


ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "launcher"
DOCS = ROOT / "docs/development/index.md"

NODE_SIDE = (
    "launcher.slurm",  # hostlist expansion, the port rule (the composer uses them too)
    "launcher.node",  # outside the container: host python3, stdlib only (test_node_code.py)
    "launcher.task",  # in the tasks' Python: torchrun_jsc, the stack hook, the Ray agent
    "launcher.requeue",  # imported by the training program
    "launcher.gpu",  # imported by the training program
)
# Importing these runs them (sys.exit(main())): statically checked only.
PROGRAMS = {"launcher.task.torchrun_jsc.__main__", "launcher.node.run", "launcher.task.run",
            "launcher.task.hook.sitecustomize"}


def module_names() -> Dict[str, Path]:
    """Every module under launcher/ by dotted name (a package by its own name)."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = module_names()


def is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def ancestors(name: str) -> List[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def imports(name: str) -> Set[str]:
    """The launcher modules ``name`` imports anywhere in its text (module level, functions,
    guarded blocks), with the packages an import runs on the way (``import launcher.a.b``
    runs ``launcher.a`` first), except ``name``'s own packages (already running)."""
    package = name if is_package(name) else name.rpartition(".")[0]
    targets: Set[str] = set()
    for node in ast.walk(ast.parse(MODULES[name].read_text(encoding="utf-8"))):
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
                targets.add(full if full in MODULES else module)
    out = set()
    for target in targets:
        if target.split(".")[0] != "launcher":
            continue
        assert target in MODULES, f"{name} imports {target}, which is not in launcher/"
        out.add(target)
        out.update(a for a in ancestors(target) if a not in ancestors(name))
    out.discard(name)
    return out


GRAPH = {name: imports(name) for name in MODULES}


def node_side() -> Set[str]:
    """NODE_SIDE with each package expanded to its modules."""
    for entry in NODE_SIDE:
        assert entry in MODULES, f"NODE_SIDE names {entry}, which is not in launcher/"
    return {m for m in MODULES for e in NODE_SIDE if m == e or m.startswith(e + ".")}


NODE = node_side()
# The package roots a node-side module's import runs first: allowed, and held to the rule.
ROOTS = {a for m in NODE for a in ancestors(m)} - NODE
COMPOSER = set(MODULES) - NODE - ROOTS


def test_the_layout_has_both_sides():
    """The lists above mean something: the composer's main parts are not node-side."""
    assert {"launcher.cli", "launcher.spec", "launcher.modes", "launcher.modes.ray",
            "launcher.runtimes", "launcher.jobscript", "launcher.preview", "launcher.model",
            "launcher.yamlread", "launcher.shell", "launcher.doctor.ship"} <= COMPOSER
    assert {"launcher.task.ray", "launcher.task.procs", "launcher.task.torchrun_jsc.decide"} <= NODE
    assert ROOTS == {"launcher"}


@pytest.mark.parametrize("name", sorted((NODE | ROOTS) - PROGRAMS))
def test_a_node_side_module_loads_no_composer_module_nor_yaml(name):
    """Imported alone in a fresh interpreter, as on a compute node."""
    code = ("import importlib, sys; before = set(sys.modules); "
            f"importlib.import_module({name!r}); "
            "print('\\n'.join(sorted(set(sys.modules) - before)))")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    loaded = done.stdout.split()
    assert name in loaded, done.stdout  # it did import it here
    bad = [m for m in loaded if m in COMPOSER or m == "yaml" or m.startswith("yaml.")]
    assert not bad, f"importing {name} on a node loads {', '.join(bad)}"


def test_node_side_imports_stay_on_the_node_side():
    """Static, so an import inside a function (the one run later on the node) counts too."""
    bad = sorted(f"{m} imports {t}" for m in NODE | ROOTS for t in GRAPH[m] if t in COMPOSER)
    assert not bad, "node-side code imports composer code: " + "; ".join(bad)


def cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """The strongly connected components with more than one module (Tarjan), sorted."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    out: List[List[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
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

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def test_cycles_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_import_graph_sees_lazy_and_relative_imports():
    """The graph is what the two tests below rely on: a function-level import (the one that
    closed the old cycle sat in a function), relative imports, packages run on the way."""
    torchrun_jsc = GRAPH["launcher.task.torchrun_jsc"]
    assert "launcher.task.torchrun_jsc.compat" in torchrun_jsc  # in a function
    assert "launcher.task.torchrun_jsc.forward" in torchrun_jsc  # relative
    assert {"launcher.task", "launcher.task.ray"} <= GRAPH["launcher.modes.ray"]
    assert "launcher.modes" not in GRAPH["launcher.modes.ray"]  # its own package


def test_no_import_cycle_in_launcher():
    found = cycles(GRAPH)
    assert not found, "import cycles in launcher/: " + "; ".join(
        " <-> ".join(c) for c in found)


def test_the_docs_name_the_node_side():
    """docs/development/index.md#where-code-runs: every NODE_SIDE entry appears in the table's
    compute-node rows, and every module named there is node-side."""
    text = DOCS.read_text(encoding="utf-8")
    section = re.search(r"^## Where code runs\n(.*?)(?=^## )", text, re.M | re.S)
    assert section, f"{DOCS}: no '## Where code runs' section"
    rows = [line for line in section.group(1).splitlines()
            if line.startswith("| compute node") or line.startswith("| both")]
    named = set(re.findall(r"`(launcher(?:\.\w+)*)`", "\n".join(rows)))
    assert set(NODE_SIDE) - named == set(), "node-side modules missing from the docs' table"
    assert {n for n in named if n not in NODE} == set(), "the docs' table names composer code"
