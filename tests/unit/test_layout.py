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

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Set

import pytest

from tests.helpers import architecture


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


MODULES = architecture.module_names(ROOT)


def is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


ancestors = architecture.ancestors
cycles = architecture.cycles
GRAPH = architecture.graph(ROOT)


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
            "launcher.runtimes", "launcher.render.jobscript", "launcher.render.preview", "launcher.model",
            "launcher.yamlread", "launcher.shell", "launcher.features.preflight",
            "launcher.plan"} <= COMPOSER
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


# --- The composer's stages (docs/development/architecture.md) ------------------------------
# Every unit of launcher/ (a root file, or a package as one) on one floor, top to bottom. An
# import goes to the unit's own floor or a lower one, never up; the node side imports only
# the node side (and the package root). A new unit is one line here and one in the docs.
STAGES = (
    ("edge", {"launcher.__main__", "launcher.cli"}),
    ("submit", {"launcher.submit", "launcher.submitit"}),
    ("render", {"launcher.render", "launcher.dockerfile"}),
    ("plan", {"launcher.plan"}),
    ("load", {"launcher.spec"}),
    ("features", {"launcher.features"}),
    ("modes", {"launcher.modes"}),
    ("runtimes", {"launcher.runtimes"}),
    ("ground", {"launcher.model", "launcher.yamlread", "launcher.yamlload", "launcher.shell",
                "launcher.kit"}),
    ("node side", {"launcher.slurm", "launcher.node", "launcher.task", "launcher.gpu",
                   "launcher.requeue", "launcher"}),  # launcher: the package's own face
)
# Issue 35's aims, against its figures at main 04322e7 (tests/helpers/architecture.py).
BEFORE_UNITS, BEFORE_UNIT_IMPORTS = 34, 128
UNITS = architecture.unit_graph(GRAPH)


def floor_of(unit: str) -> int:
    (floor,) = [i for i, (_, units) in enumerate(STAGES) if unit in units]
    return floor


def test_every_unit_has_one_stage():
    placed = [u for _, units in STAGES for u in units]
    assert len(placed) == len(set(placed)), "a unit on two floors"
    assert set(placed) == set(UNITS), (f"not placed: {sorted(set(UNITS) - set(placed))}; "
                                       f"gone: {sorted(set(placed) - set(UNITS))}")


def test_no_import_goes_up_a_stage():
    """cli -> submit/doctor/submitit -> render -> plan -> load (spec) -> features -> modes ->
    runtimes -> ground -> node side: a unit imports its own floor or below."""
    up = sorted(f"{u} ({STAGES[floor_of(u)][0]}) imports {t} ({STAGES[floor_of(t)][0]})"
                for u, targets in UNITS.items() for t in targets if floor_of(t) < floor_of(u))
    assert not up, up


def test_fewer_units_and_imports_than_before_issue_35():
    imports = sum(len(v) for v in UNITS.values())
    assert len(UNITS) < BEFORE_UNITS and imports < BEFORE_UNIT_IMPORTS, (len(UNITS), imports)
    assert not architecture.cycles(UNITS)


def test_hang_timeout_is_read_in_at_most_two_composer_files():
    """Issue 35: the key travelled through nine hops and three composer files read it; now
    its feature (features/hangs.py) declares, loads and renders it."""
    readers = architecture.readers("launch.hang_timeout", ROOT)
    assert len(readers) <= 2, readers
    assert "launcher.features.hangs" in readers


def test_runtimes_know_nothing_of_the_features():
    """The plan hands a runtime the prelude and the names; no runtime module imports a
    feature, and no mode does (a feature may ask a mode, never the other way)."""
    bad = sorted(f"{m} imports {t}" for m, targets in GRAPH.items()
                 if m.startswith(("launcher.runtimes", "launcher.modes"))
                 for t in targets if t.startswith("launcher.features"))
    assert not bad, bad
