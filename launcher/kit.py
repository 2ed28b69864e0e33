"""Where a job finds the kit's node-side code: ``$kit`` in every jobscript, and its files.

Where it sits: the composer's edge (launcher.cli: which kit, :func:`installed`) -> **kit**
(tokens and lines) -> the job plan, features, modes, runtimes. Jobscripts never carry the kit's code as
text: they name the kit's package directory once (``kit=...``) and call its files
(docs/development/node-code.md): ``source "$kit/node/job.sh" VERSION`` (the batch script's
functions), ``python3 -I "$kit/node/run.py" COMMAND`` (node-side Python, the host's python3),
``python3 "$kit/task/run.py" COMMAND`` (torchrun_jsc and the Ray agent, the image's python3),
``bash "$kit/node/task.sh" KIND`` (the task scripts). Container runtimes bind ``$kit``
read-only at its own path, so the same name holds inside, whatever the image contains.
"""

from __future__ import annotations

import posixpath
from pathlib import Path
from typing import List, Optional

from launcher import __version__
from launcher.node.doctor.local import fs_type
from launcher.shell import Raw, Statement, Token, Var, quote, word

KIT = Var("kit")
# The kit of a clone's jobs/*.job (`make jobs`, launcher.kit.for_render in the clone's root):
# relative to the submit directory, "$PWD/launcher", submitted from the clone's root.
DEFAULT = "launcher"
LOG_ENV = "TORCHRUN_JSC_KIT_LOG"  # launcher/task/run.py: node 0's agent names the kit it runs
# Filesystems that exist on one node only: a kit there is not on the compute nodes.
NODE_LOCAL_FS = ("tmpfs", "ramfs", "devtmpfs")
NODE_LOCAL_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run")


def installed() -> Path:
    """This kit's package directory (launcher/), as installed or in a clone."""
    return Path(__file__).resolve().parent


def for_render(cwd: Path, kit: Optional[Path] = None) -> str:
    """The kit path a jobscript rendered in ``cwd`` names: relative to it where the kit lies
    inside it (a clone's jobs, submitted from its root), else absolute."""
    kit = (kit or installed()).resolve()
    try:
        return kit.relative_to(cwd.resolve()).as_posix() or "."
    except ValueError:
        return kit.as_posix()


def path_token(kit: str) -> Token:
    """``kit`` as the jobscript writes it: a relative path is the submit directory's."""
    if posixpath.isabs(kit):
        return kit
    return word(Var("PWD"), "/", kit) if kit != "." else Var("PWD")


def file(rel: str) -> Token:
    """A file of the kit, e.g. file('node/run.py') -> "${kit}/node/run.py"."""
    return word(KIT, "/" + rel)


def node_python(command: str, *args: Token) -> List[Token]:
    """python3 -I "$kit/node/run.py" COMMAND ARGS: the host's python3, isolated (neither the
    submit directory nor PYTHONPATH on sys.path: a user's socket.py cannot replace the
    standard library's)."""
    return ["python3", "-I", file("node/run.py"), command, *args]


def task_python(command: str, *args: Token) -> List[Token]:
    """python3 "$kit/task/run.py" COMMAND ARGS: the task's python3 (the image's, the venv's),
    not isolated, so the image's own paths to torch or ray hold."""
    return ["python3", file("task/run.py"), command, *args]


def task_script(kind: str) -> List[Token]:
    """bash "$kit/node/task.sh" KIND: the task script (launcher/node/task.sh) before ARGV."""
    return ["bash", file("node/task.sh"), kind]


def lines(kit: str, version: str = __version__) -> List[Statement]:
    """Batch scope, first: the kit's path, one line where this node cannot see it, its
    functions (launcher/node/job.sh, which stops the job where the kit there is another
    version)."""
    missing = ('[ -r "$kit/node/job.sh" ] || { echo "jsc-compose: no kit at $kit on '
               '$(hostname): install torchrun-jsc-kit where every node sees it (e.g. in '
               '\\$PROJECT) and render again" >&2; exit 1; }')
    return [Raw(f"# The kit's code for the nodes (torchrun-jsc-kit {version}), on storage "
                "every node must see."),
            Raw(f"kit={quote(path_token(kit))}"),
            Raw(missing),
            Raw(f'source "$kit/node/job.sh" {quote(version)} || exit 1')]


def local_problem(kit: Path, mounts: str) -> Optional[str]:
    """Why the compute nodes cannot see ``kit`` (a node-local filesystem or directory), or
    None where nothing here says so. ``mounts``: /proc/self/mounts' text (the doctor's
    fs_type reads it, the one parser of it)."""
    path = kit.resolve().as_posix()
    fstype = fs_type(path, mounts)
    local_dir = next((d for d in NODE_LOCAL_DIRS if path == d or path.startswith(d + "/")),
                     None)
    if fstype not in NODE_LOCAL_FS and not local_dir:
        return None
    where = fstype if fstype in NODE_LOCAL_FS else local_dir
    return (f"the kit at {path} is on this node only ({where}): the compute nodes cannot "
            "run its node-side code; install torchrun-jsc-kit on storage every node sees "
            "(e.g. pip install --target $PROJECT/... or a venv in $PROJECT) and render "
            "again, or pass --kit DIR with a copy there")


def mounts() -> str:
    """This machine's /proc/self/mounts ('' where it cannot be read)."""
    try:
        with open("/proc/self/mounts", encoding="utf-8") as f:
            return f.read()
    except OSError:
        return ""


__all__ = ["DEFAULT", "KIT", "LOG_ENV", "file", "for_render", "installed", "lines",
           "local_problem", "mounts", "node_python", "path_token", "task_python",
           "task_script"]
