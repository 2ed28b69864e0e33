"""The entry of the kit's code in the tasks' Python: ``python3 KIT/task/run.py COMMAND ARGS...``.

Run with the image's python3 inside a container (the kit's package directory KIT is bound
there read-only at its own path) or the venv's on a bare node, so the image's torch or ray
is what it imports; the kit itself comes from KIT, loaded by path like launcher/node/run.py
does (whose loader this uses): an image without the kit runs it unchanged, and an image with
its own ``launcher`` package (the kit's, another version, or something else of that name)
neither shadows it nor is shadowed for the program, whose processes never see KIT on their
path. Python >= 3.8 (docs/development/node-code.md).

Commands:

- ``torchrun_jsc ARGS``: the per-node launcher (launcher.task.torchrun_jsc).
- ``ray-node ARGS``: the per-node Ray agent of launch mode ray (launcher.task.ray).

Where the jobscript sets TORCHRUN_JSC_KIT_LOG=1, node 0's agent writes one line that says which kit
runs and, where the image has a ``launcher`` package of its own, that it is not used.
"""

import importlib.util
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
KIT = os.path.dirname(HERE)
COMMANDS = {
    "torchrun_jsc": ("launcher.task.torchrun_jsc", "main"),
    "ray-node": ("launcher.task.ray", "main"),
}
LOG_ENV = "TORCHRUN_JSC_KIT_LOG"
_VERSION = re.compile(r'^__version__ = "([^"]*)"', re.M)


def _node_run():
    path = os.path.join(KIT, "node", "run.py")
    spec = importlib.util.spec_from_file_location("jsc_kit_node_run", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def version_of(package_dir):
    """The kit version a ``launcher`` package directory declares, or None (not the kit)."""
    try:
        with open(os.path.join(package_dir, "__init__.py"), encoding="utf-8") as f:
            found = _VERSION.search(f.read())
    except OSError:
        return None
    return found.group(1) if found else None


def kit_line(kit, own):
    """Which kit runs, and the image's own ``launcher`` package (a directory or None)."""
    line = "torchrun-jsc-kit {} from {}".format(version_of(kit), kit)
    if own and os.path.realpath(own) != os.path.realpath(kit):
        if os.path.isdir(os.path.join(own, "task")) or os.path.isdir(os.path.join(own, "torchrun_jsc")):
            what = "the image's own kit {} at {}".format(version_of(own) or "?", own)
        else:
            what = "the image's unrelated launcher package at {}".format(own)
        line += " ({} is not used)".format(what)
    return line


def own_package():
    """The directory of the ``launcher`` package this Python would import, or None."""
    spec = importlib.util.find_spec("launcher")
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


if __name__ == "__main__":
    node_run = _node_run()
    node_run.drop_script_dir(HERE)
    if os.environ.get(LOG_ENV) == "1" and os.environ.get("SLURM_NODEID", "0") == "0":
        sys.stderr.write(kit_line(KIT, own_package()) + "\n")
        sys.stderr.flush()
    node_run.load_kit(KIT)
    sys.exit(node_run.dispatch(COMMANDS, sys.argv[1:], "launcher/task/run.py"))
