"""Ring 1: the program's API, ``torchrun_jsc_kit`` (launcher/task/hook/torchrun_jsc_kit, issue
34): the kit's version, the standard library only (it runs in any image), the old names
(``launcher.requeue``, ``launcher.gpu``, ``launcher.progress``) are the same objects, and
``progress()`` reaches the stack hook where one is armed and does nothing otherwise."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import launcher
from launcher.task.hook import torchrun_jsc_kit as kit

API = Path(kit.__file__).parent
STDLIB = set(sys.stdlib_module_names)


def test_its_version_is_the_kits():
    assert kit.__version__ == launcher.__version__


def test_standard_library_and_itself_only():
    for path in sorted(API.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module]
            else:
                continue
            for name in names:
                assert name.split(".")[0] in STDLIB | {"torch"}, f"{path.name}: imports {name}"


def test_the_old_names_are_the_same_objects():
    from launcher import gpu, requeue

    assert requeue.StopRequest is kit.StopRequest and gpu.select_device is kit.select_device
    assert launcher.HOOK_MODULE == kit.HOOK_MODULE


def test_progress_reaches_the_armed_hook_only(monkeypatch):
    kit.progress()  # no hook: nothing happens
    calls = []
    hook = type(sys)("jsc_stacks_hook")
    hook.progress = lambda: calls.append(1)
    monkeypatch.setitem(sys.modules, kit.HOOK_MODULE, hook)
    kit.progress()
    launcher.progress()
    assert calls == [1, 1]
