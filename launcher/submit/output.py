"""Where the composer writes a file (`render -o`, `submit`, `venv`, `timeline --svg`): a
regular file, written whole or not at all.

Where it sits: the submit stage's file edge (launcher.submit.write_script calls it). The
rules, checked before anything else runs (a venv's downloads, sbatch):

- A regular file, or a new one in an existing directory, is written atomically: a temporary
  file in the same directory, renamed over it, so a reader (or sbatch) never sees half a
  script. An existing file keeps its permission bits; a new one gets 0644.
- A symlink to a regular file is written through: the file it names is replaced (in its own
  directory), the link stays, as an editor's save would do.
- Anything else is refused in one line, before it is touched: a directory, a FIFO, a device
  (``/dev/null``, ``/dev/full``: as root the rename would replace the device node), a
  socket, a dangling symlink, a missing directory. `render -o -` writes to stdout instead.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from launcher.model import SpecError, SubmitError

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))


def output_target(path: str, flag: str = "-o") -> str:
    """The regular file to replace for ``path`` (through a symlink), or a new file's path;
    SpecError (one line, naming the option ``flag``) for anything that is not, or could not
    be, a regular file."""
    def refuse(what: str) -> SpecError:
        hint = " (render -o - writes to stdout)" if flag == "-o" else ""
        return SpecError(flag, "", f"{path!r} {what}: {flag} writes a regular file{hint}")
    if path == "" or path.endswith("/"):
        raise refuse("names a directory")
    real = os.path.realpath(path) if os.path.islink(path) else path
    try:
        mode = os.stat(real).st_mode
    except FileNotFoundError:
        if real != path:
            raise refuse(f"is a symlink to a missing file ({real})") from None
        folder = os.path.dirname(path) or "."
        if not os.path.isdir(folder):
            raise refuse(f"is in a directory that does not exist ({folder}); create it "
                         "first") from None
        return path
    except OSError as exc:
        raise refuse(f"cannot be looked at ({exc.strerror or exc})") from None
    for test, kind in _KINDS:
        if test(mode):
            raise refuse(f"is {kind}, not a regular file")
    return real


def write_file(text: str, path: str, flag: str = "-o") -> None:
    """Write ``text`` to the regular file ``path`` names (:func:`output_target`) atomically."""
    target = Path(output_target(path, flag))
    try:
        keep = stat.S_IMODE(os.stat(target).st_mode)
    except OSError:
        keep = 0o644
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    except OSError as exc:
        raise SubmitError(f"{path}: cannot write: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
        os.chmod(tmp, keep)
        os.replace(tmp, target)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise SubmitError(f"{path}: cannot write: {exc.strerror or exc}") from None


__all__ = ["output_target", "write_file"]
