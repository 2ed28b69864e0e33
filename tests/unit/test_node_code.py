"""Ring 1: the contract of the kit's node-side code (docs/development/node-code.md).

``launcher/node/`` runs on the compute node outside any container with the host's python3
(RHEL 8: 3.6), loaded by path through ``python3 -I KIT/node/run.py COMMAND``: standard library,
``launcher.node.*``, ``launcher.slurm`` and the ``launcher`` root only; parses as Python 3.6,
no ``from __future__ import annotations``, none of the 3.7+ names below. What it imports of the
kit (the ``launcher`` root always: run.py executes it first) is held to the same contract.
Where a Python 3.6 is installed, the node code is also loaded and run under it for real.

``launcher/task/`` runs in the tasks' Python (the image's python3 >= 3.8): it imports nothing
of the composer (the static half of tests/unit/test_layout.py's rule, per file).
"""

from __future__ import annotations

import ast
import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional, Set, Tuple

import pytest

from launcher import kit


PACKAGE = kit.installed()  # launcher/
ROOT = PACKAGE.parent
NODE_DIR = PACKAGE / "node"
TASK_DIR = PACKAGE / "task"
# Standard-library names and keywords that appeared after Python 3.6.
NEWER_MODULES = {"dataclasses", "contextvars", "importlib.metadata", "importlib.resources",
                 "zoneinfo", "graphlib", "tomllib"}
NEWER_ATTRIBUTES = {"monotonic_ns", "time_ns", "perf_counter_ns", "fromisoformat",
                    "removeprefix", "removesuffix", "nullcontext", "isascii", "cached_property",
                    "is_relative_to", "get_running_loop", "create_task", "shlex_join"}
NEWER_KEYWORDS = {"capture_output", "text"}  # subprocess.run, 3.7
# The kit's modules node code may import besides launcher.node.*.
NODE_MAY_IMPORT = {"launcher", "launcher.slurm"}


def py_files(folder: Path) -> List[str]:
    return sorted(p.relative_to(ROOT).as_posix() for p in folder.rglob("*.py"))


NODE_FILES = py_files(NODE_DIR)
TASK_FILES = py_files(TASK_DIR)


def dotted(path: str) -> str:
    parts = list(Path(path).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def file_of(module: str) -> Optional[str]:
    """The file of a ``launcher`` module, or None where there is none."""
    base = ROOT / module.replace(".", "/")
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate.relative_to(ROOT).as_posix()
    return None


def tree(path: str, version: Tuple[int, int] = (3, 6)) -> ast.Module:
    return ast.parse((ROOT / path).read_text(encoding="utf-8"), path, feature_version=version)


def imported(path: str, mod: ast.Module) -> List[Tuple[int, str]]:
    """(line, dotted name) of every import anywhere in the module, relative ones resolved;
    ``from a import b`` counts as a.b where that is a module of the kit, else as a (and, for
    the 3.7+ check, as a.b too: ``from importlib import metadata``)."""
    package = dotted(path) if path.endswith("__init__.py") else dotted(path).rpartition(".")[0]
    out: List[Tuple[int, str]] = []
    for node in ast.walk(mod):
        if isinstance(node, ast.Import):
            out.extend((node.lineno, a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = parts[:len(parts) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            out.append((node.lineno, module))
            out.extend((node.lineno, f"{module}.{a.name}") for a in node.names
                       if module.split(".")[0] != "launcher" or file_of(f"{module}.{a.name}"))
    return out


def kit_imports(path: str, version: Tuple[int, int]) -> Set[str]:
    return {name for _, name in imported(path, tree(path, version))
            if name.split(".")[0] == "launcher"}


def node_closure() -> List[str]:
    """Every file that node code runs: launcher/node/, the launcher root (run.py executes it
    first) and whatever of the kit those import, transitively."""
    todo = list(NODE_FILES) + ["launcher/__init__.py"]
    seen: Set[str] = set()
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for name in kit_imports(path, (3, 6)):
            target = file_of(name)
            if target:
                todo.append(target)
    return sorted(seen)


def test_the_folders_hold_the_code_the_jobs_run():
    """The lists below mean something: the entries, the collector, the rule, the doctor."""
    assert {"launcher/node/run.py", "launcher/node/stacks.py", "launcher/node/net/probe.py",
            "launcher/node/net/addresses.py", "launcher/node/doctor/node.py",
            "launcher/node/doctor/report.py"} <= set(NODE_FILES)
    assert {"launcher/task/run.py", "launcher/task/ray.py", "launcher/task/procs.py",
            "launcher/task/hook/sitecustomize.py",
            "launcher/task/torchrun_jsc/__init__.py"} <= set(TASK_FILES)


@pytest.mark.parametrize("path", NODE_FILES)
def test_node_code_imports_the_standard_library_and_the_node_side_only(path):
    for line, name in imported(path, tree(path)):
        top = name.split(".")[0]
        if top == "launcher":
            assert (name in NODE_MAY_IMPORT or name == "launcher.node"
                    or name.startswith("launcher.node.")), \
                f"{path}:{line}: imports {name}, which is neither launcher.node.*, " \
                f"launcher.slurm nor the launcher root"
            assert file_of(name), f"{path}:{line}: {name} is not in launcher/"
            continue
        assert top in sys.stdlib_module_names, \
            f"{path}:{line}: {name} is not in the standard library"


@pytest.mark.parametrize("path", node_closure())
def test_no_future_annotations_nor_modules_newer_than_python_3_6(path):
    """Parsing with feature_version=(3, 6) fails on 3.8+ syntax (the walrus, positional-only
    parameters); `from __future__ import annotations` is a SyntaxError on 3.6 itself."""
    mod = tree(path)
    for node in ast.walk(mod):
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            assert "annotations" not in {a.name for a in node.names}, \
                f"{path}:{node.lineno}: from __future__ import annotations (Python 3.7+)"
    for line, name in imported(path, mod):
        assert name not in NEWER_MODULES, f"{path}:{line}: {name} is newer than Python 3.6"


@pytest.mark.parametrize("path", node_closure())
def test_no_api_newer_than_python_3_6(path):
    for node in ast.walk(tree(path)):
        if isinstance(node, ast.Attribute):
            assert node.attr not in NEWER_ATTRIBUTES, f"{path}:{node.lineno}: .{node.attr}"
        if isinstance(node, ast.Call):
            bad = {k.arg for k in node.keywords} & NEWER_KEYWORDS
            assert not bad, f"{path}:{node.lineno}: keyword {bad} (Python 3.7+)"


def test_the_checks_catch_what_they_look_for(tmp_path, monkeypatch):
    """The checks above on a module that breaks each rule (so a pass means something)."""
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    probe = tmp_path / "launcher/node/_contract_probe.py"
    probe.parent.mkdir(parents=True)
    (tmp_path / "launcher/__init__.py").write_text("")
    (tmp_path / "launcher/node/__init__.py").write_text("")
    (tmp_path / "launcher/spec.py").write_text("")
    path = "launcher/node/_contract_probe.py"
    for text in ("from launcher.spec import x\n", "import yaml\n", "from .. import spec\n"):
        probe.write_text(text)
        with pytest.raises(AssertionError):
            test_node_code_imports_the_standard_library_and_the_node_side_only(path)
    for text in ("from __future__ import annotations\n", "from importlib import metadata\n",
                 "import dataclasses\n", "if (n := 1):\n    pass\n"):
        probe.write_text(text)
        with pytest.raises((AssertionError, SyntaxError)):
            test_no_future_annotations_nor_modules_newer_than_python_3_6(path)
    for text in ("import time\ntime.time_ns()\n",
                 "import subprocess\nsubprocess.run([], capture_output=True)\n"):
        probe.write_text(text)
        with pytest.raises(AssertionError):
            test_no_api_newer_than_python_3_6(path)


@pytest.mark.parametrize("path", NODE_FILES)
def test_nothing_runs_on_import_but_definitions(path):
    """run.py imports a module and calls its entry; the task code and the composer import
    these modules too: importing one runs nothing but definitions (and its script part stays
    under ``if __name__ == "__main__"``)."""
    allowed = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef, ast.Assign,
               ast.AnnAssign)
    for i, node in enumerate(tree(path).body):
        docstring = i == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        main = (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
                and isinstance(node.test.left, ast.Name) and node.test.left.id == "__name__"
                and not node.orelse)
        assert docstring or main or isinstance(node, allowed), \
            f"{path}:{node.lineno}: {type(node).__name__} at top level"


def entries(run_py: Path) -> Dict[str, Tuple[str, str]]:
    """The COMMANDS table of a run.py: command -> (module, function)."""
    for node in tree(run_py.relative_to(ROOT).as_posix(), (3, 6)).body:
        if isinstance(node, ast.Assign) and [t.id for t in node.targets
                                             if isinstance(t, ast.Name)] == ["COMMANDS"]:
            return ast.literal_eval(node.value)
    raise AssertionError(f"{run_py}: no COMMANDS")


@pytest.mark.parametrize("folder", ["node", "task"])
def test_each_command_of_run_py_is_a_function_of_its_own_folder(folder):
    commands = entries(PACKAGE / folder / "run.py")
    assert commands
    for command, (module, function) in commands.items():
        assert module.startswith(f"launcher.{folder}."), f"{command}: {module}"
        path = file_of(module)
        assert path, f"{command}: {module} is not in launcher/"
        version = (3, 6) if folder == "node" else (3, 8)
        defined = {n.name for n in tree(path, version).body if isinstance(n, ast.FunctionDef)}
        assert function in defined, f"{command}: {module} defines no {function}()"


@pytest.mark.parametrize("path", TASK_FILES)
def test_task_code_imports_nothing_of_the_composer(path):
    """Python >= 3.8 (the images' floor), and of the kit only launcher.task.*, launcher.node.*,
    launcher.slurm, launcher.gpu (the device rule, stdlib) and the root (torch, ray and the
    standard library otherwise)."""
    for name in kit_imports(path, (3, 8)):
        assert (name in NODE_MAY_IMPORT | {"launcher.gpu"} or
                name.split(".")[:2] in (["launcher", "task"],
                                                                   ["launcher", "node"])), \
            f"{path}: imports {name}, composer code"


def python36() -> Optional[str]:
    """A working Python 3.6 interpreter here, or None (pyenv's shim answers without one)."""
    candidates = [shutil.which("python3.6") or ""]
    candidates += sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.6*/bin/python3.6")))
    for exe in candidates:
        if not exe:
            continue
        try:
            done = subprocess.run([exe, "-c", "import sys; print(sys.version_info[:2])"],
                                  capture_output=True, text=True, timeout=30, check=False)
        except OSError:
            continue
        if done.returncode == 0 and done.stdout.strip() == "(3, 6)":
            return exe
    return None


PY36 = python36()
needs_36 = pytest.mark.skipif(PY36 is None, reason="no Python 3.6 interpreter on this machine")


@needs_36
def test_node_code_loads_under_python_3_6():
    """Every module of launcher/node, loaded the way run.py loads the kit (by path, -I)."""
    modules = sorted(dotted(p) for p in NODE_FILES if not p.endswith("/run.py"))
    code = ("import importlib, runpy, sys\n"
            f"run = runpy.run_path({str(NODE_DIR / 'run.py')!r})\n"
            "run['load_kit']()\n"
            f"for name in {modules!r}:\n"
            "    importlib.import_module(name)\n"
            "print(sys.modules['launcher'].__file__)\n")
    done = subprocess.run([PY36, "-I", "-c", code], cwd="/", capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(PACKAGE / "__init__.py")


@needs_36
def test_node_run_py_runs_a_command_under_python_3_6(tmp_path):
    """The entry itself, as the task scripts call it: `net-env` towards 127.0.0.1 picks the
    loopback interface (alone on that route); an unknown command is one line and exit 2."""
    run = [PY36, "-I", str(NODE_DIR / "run.py")]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    net = subprocess.run(run + ["net-env", "127.0.0.1"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=60, check=False)
    assert net.returncode == 0, net.stderr
    assert net.stdout.splitlines() == ["export GLOO_SOCKET_IFNAME=lo",
                                       "export NCCL_SOCKET_IFNAME==lo"], net.stdout
    bad = subprocess.run(run + ["nonsense"], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=60, check=False)
    assert bad.returncode == 2
    assert bad.stderr.count("\n") == 1 and "nonsense" in bad.stderr and "net-env" in bad.stderr


def test_every_kit_shell_file_passes_shellcheck():
    """The kit's own shell files (node side: bash; the task prelude hook.sh and the nccl-net.sh
    it sources, and Enroot's command script enroot-rc.sh, all run by the container's sh: POSIX
    sh), each checked as run, following what it sources; a finding is either fixed or annotated
    in the file with why."""
    assert shutil.which("shellcheck"), "shellcheck missing: run `make setup` (apt shellcheck)"
    files = sorted(NODE_DIR.glob("*.sh")) + sorted(TASK_DIR.glob("*.sh"))
    assert len(files) >= 8, files
    for path in files:
        shell = "sh" if path.name in ("hook.sh", "nccl-net.sh", "enroot-rc.sh") else "bash"
        done = subprocess.run(["shellcheck", "-x", f"--shell={shell}", path.name],
                              cwd=path.parent, capture_output=True, text=True, timeout=60,
                              check=False)
        assert done.returncode == 0, f"{path}:\n{done.stdout}{done.stderr}"


def test_enroot_start_refuses_what_the_mount_rule_refuses():
    """enroot-start.sh checks TORCHRUN_JSC_CACHE with the pattern the composer's Enroot mount
    rule writes for every other bind (launcher.runtimes.enroot_scripts.MOUNT_RULE)."""
    from launcher.runtimes.enroot_scripts import MOUNT_RULE

    text = (NODE_DIR / "enroot-start.sh").read_text()
    assert f'case "${{TORCHRUN_JSC_CACHE:-}}" in {MOUNT_RULE.glob()})' in text
