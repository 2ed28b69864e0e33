"""The entry of the kit's node-side code: ``python3 -I KIT/node/run.py COMMAND ARGS...``.

KIT is the kit's package directory (``launcher/``) on storage every node sees; the jobscript
names it once (``kit=...``) and calls its code by path, never as text. This file loads that
package as ``launcher`` by its path alone: neither the node's sys.path nor an image's or a
venv's own ``launcher`` package can shadow it, and nothing of the kit lands on sys.path for
the imports that follow. Standard library only, Python >= 3.6 (docs/development/node-code.md).

Commands (each a module's entry function, called with the remaining arguments; its return
value is the exit status):

- ``net-env [--mpi] HOST``: the export lines that pick the socket interface towards HOST
  (launcher.node.net.probe ``task_env_main``), eval'ed by the task scripts.
- ``endpoint NODE [IFNAME]``: the rendezvous host on a site without a profile: NODE, or its
  fast interface's address where NODE resolves to another (launcher.node.net.fast).
- ``image-arch IMAGE``: status 3 and one line where IMAGE is for another CPU architecture than
  this node's (launcher.node.image_arch).
- ``stacks node|report|watch ...``: the stack collector, its report, the progress watcher
  (launcher.node.stacks).
- ``doctor node|table|json ...``: the doctor's per-node checks and report.
- ``spares run|beat ...``: spare nodes (job.spare_nodes): the supervisor in the batch shell
  that replaces a node whose heartbeat stopped, and each node's heartbeat (launcher.node.spares).
"""

import importlib
import importlib.util
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
KIT = os.path.dirname(HERE)  # the kit's package directory, launcher/
COMMANDS = {
    "net-env": ("launcher.node.net.probe", "task_env_main"),
    "endpoint": ("launcher.node.net.fast", "endpoint_main"),
    "image-arch": ("launcher.node.image_arch", "main"),
    "stacks": ("launcher.node.stacks", "main"),
    "doctor": ("launcher.node.doctor.report", "main"),
    "spares": ("launcher.node.spares", "main"),
}


def load_kit(kit=KIT):
    """The package at ``kit`` as ``launcher`` in sys.modules (replacing none: called first)."""
    spec = importlib.util.spec_from_file_location(
        "launcher", os.path.join(kit, "__init__.py"), submodule_search_locations=[kit])
    module = importlib.util.module_from_spec(spec)
    sys.modules["launcher"] = module
    spec.loader.exec_module(module)
    return module


def drop_script_dir(here=HERE):
    """Python < 3.11 puts the script's directory first on sys.path even under -I: not ours."""
    if sys.path and os.path.abspath(sys.path[0] or ".") == here:
        del sys.path[0]


def dispatch(commands, argv, prog):
    """Run ``argv[0]``'s entry with the rest; one line and exit 2 for an unknown command."""
    if not argv or argv[0] not in commands:
        sys.stderr.write("{}: command {!r} is not one of: {}\n".format(
            prog, argv[0] if argv else "", ", ".join(sorted(commands))))
        return 2
    module, function = commands[argv[0]]
    return getattr(importlib.import_module(module), function)(argv[1:])


if __name__ == "__main__":
    drop_script_dir()
    load_kit()
    sys.exit(dispatch(COMMANDS, sys.argv[1:], "launcher/node/run.py"))
