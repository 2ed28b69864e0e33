"""The submit stage, the thin edge that touches the machine: write a rendered script and call
sbatch (here), run the doctor's job and read its reports (``doctor``), run `jsc-compose
stacks`' step across a running job's nodes (``stacks``).

Where it sits: spec (load) -> plan -> render (text) -> **submit**. Everything above is pure;
this package alone (with launcher.submitit, which hands a plan to submitit) writes files and
runs processes, and raises SubmitError instead of exiting.
"""

from __future__ import annotations

import os
import posixpath
import re
import subprocess
from typing import List, Mapping, Optional, Sequence

from launcher.model import JobSpec, SpecError, SubmitError
from launcher.shell import Var, expansion_parts
from launcher.submit.output import write_file


def write_script(text: str, path: str) -> None:
    """Write atomically (temp file + rename), so a failure never leaves half a script; only a
    regular file (launcher.submit.output)."""
    write_file(text, path)


def check_log_dirs(spec: JobSpec, cwd: str = ".") -> List[str]:
    """Refuse a job.output/job.error whose directory does not exist where sbatch runs (cwd,
    or job.sbatch.chdir): Slurm would fail the job without writing any log. A directory
    with %-patterns is only known at run time; it is returned as a note, unchecked."""
    chdir = dict(spec.job.sbatch).get("chdir")
    if chdir and "%" in chdir:
        return ["job.sbatch.chdir holds %-patterns: log directories not checked"]
    base = os.path.join(cwd, chdir) if chdir else cwd
    notes = []
    for key, value in (("output", spec.job.output), ("error", spec.job.error)):
        folder = posixpath.dirname(value or "")
        if not folder:
            continue
        if "%" in folder:
            notes.append(f"job.{key} directory {folder!r} holds %-patterns: not checked")
        elif not os.path.isdir(os.path.join(base, folder)):
            raise SpecError(spec.source, f"job.{key}", f"directory {folder!r} does not exist "
                            f"(relative to {os.path.abspath(base)}, where the job starts); "
                            "create it first: Slurm would fail the job without any log", value)
    return notes


NODE_LOCAL = ("/tmp", "/dev/shm", "/var/tmp")
_SCHEME = re.compile(r"[a-z][a-z0-9+.-]*://")


def local_image_path(image: str, env: Mapping[str, str], cwd: str) -> Optional[str]:
    """Where a runtime.image file is on this machine ($NAME, ${NAME} and ~/ expanded from
    env, relative to cwd), or None for a registry reference or a name that env lacks."""
    if _SCHEME.match(image) or "#" in image:
        return None
    for part in expansion_parts(image):
        if isinstance(part, Var) and part.name not in env:
            return None
    text = "".join(p if isinstance(p, str) else env[p.name] for p in expansion_parts(image))
    return os.path.normpath(os.path.join(cwd, text))


def submit_warnings(spec: JobSpec, env: Mapping[str, str], cwd: str,
                    submitting: bool = False) -> List[str]:
    """Lines for stderr: an image file missing where the spec says, and a node-local submit
    directory (the compute nodes cannot see it: the job would die without a log)."""
    out: List[str] = []
    image = spec.runtime.image
    path = None if image is None or spec.runtime.kind == "bare" else \
        local_image_path(image, env, cwd)
    looks_local = image is not None and (spec.runtime.kind != "pyxis" or
                                         image.endswith((".sqsh", ".squashfs")))
    if path is not None and looks_local and not os.path.exists(path):
        out.append(f"{spec.source}: warning: runtime.image {image!r} does not exist here "
                   f"({path}, relative to the submit directory {cwd}); build or copy it first")
    if image is not None and spec.runtime.kind == "apptainer" and _SCHEME.match(image) \
            and not image.startswith(("http://", "https://")):
        out.append(f"{spec.source}: warning: runtime.image {image!r} is pulled by every node at "
                   "run time; compute nodes without internet (JSC's) fail: pull it on the "
                   "login node (apptainer pull image.sif IMAGE) and name the .sif file")
    real = os.path.realpath(cwd)
    if submitting and any(real == d or real.startswith(d + "/") for d in NODE_LOCAL):
        out.append(f"warning: the submit directory {real} is node-local ({real.split('/')[1]} "
                   "on the login node): compute nodes cannot see it, so the job would fail "
                   "without a log; submit from $HOME, $PROJECT or $SCRATCH")
    return out


def sbatch(script: str, extra: Sequence[str] = (), timeout: float = 60.0) -> str:
    """Submit with ``sbatch --parsable`` and return the job id."""
    argv = ["sbatch", "--parsable", *extra, script]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError:
        raise SubmitError("sbatch not found on PATH: submit from a Slurm login node, or "
                          "use `render -o FILE` and copy the script there") from None
    except subprocess.TimeoutExpired:
        raise SubmitError(f"sbatch did not answer within {timeout:.0f} s") from None
    if done.returncode != 0:
        reason = " ".join(done.stderr.split()) or f"exit status {done.returncode}"
        raise SubmitError(f"sbatch {script} failed: {reason}")
    job_id = done.stdout.strip().split(";")[0]
    if not job_id.isdigit():
        raise SubmitError(f"sbatch {script}: unexpected answer {done.stdout.strip()!r}")
    return job_id


__all__ = ["SubmitError", "check_log_dirs", "local_image_path", "sbatch", "submit_warnings",
           "write_script"]
