"""ENTRYPOINT + CMD -> %runscript with Docker's rules, and the final stage's %labels.

Where it sits: part of ``launcher.dockerfile.render`` (the final stage only). Docker's rules:
``docker run IMAGE ARGS`` replaces CMD with ARGS and keeps an exec-form ENTRYPOINT; a
shell-form ENTRYPOINT takes neither; a shell-form CMD runs under SHELL (``/bin/sh -c``); the
container starts in WORKDIR. ``apptainer run IMAGE ARGS`` does the same with this runscript.
CMD and ENTRYPOINT come from spython's parse of the stage (launcher.dockerfile.spython).
"""

from __future__ import annotations

import shlex
from typing import List, Optional, Sequence

from launcher.dockerfile.lexer import Instruction
from launcher.dockerfile.spython import Form, stage_values
from launcher.dockerfile.stages import Stage


def final_sections(stage: Stage, state, source: str, notes: List[str]) -> List[str]:
    out: List[str] = []
    if state.labels:
        out += ["", "%labels"] + [f"    {k} {v}" for k, v in state.labels]
    values = stage_values(stage.instructions)
    cmd, entry = values.cmd, values.entrypoint
    entry_index = _last(stage.instructions, "ENTRYPOINT")
    cmd_index = _last(stage.instructions, "CMD")
    if entry_index is not None and cmd_index is not None and cmd_index < stage.inherited <= \
            entry_index:
        cmd = None  # an ENTRYPOINT resets the CMD of the image it is built on (Docker)
    if entry is None and cmd is None:
        if state.workdir_set:
            notes.append(f"{source}: no CMD or ENTRYPOINT: apptainer run starts the base "
                         f"image's own, in the calling directory, not in {state.workdir}")
        return out
    if entry is None and stage.base.bootstrap == "docker":
        notes.append(f"{source}: CMD without ENTRYPOINT: apptainer run runs CMD alone; an "
                     f"ENTRYPOINT of the base image {stage.base.source}, if it has one, is "
                     "not run")
    return out + ["", "%runscript"] + [f"    {line}" for line in
                                       runscript(entry, cmd, state.shell, state.workdir)]


def _last(instructions: Sequence[Instruction], keyword: str) -> Optional[int]:
    found = [i for i, ins in enumerate(instructions) if ins.keyword == keyword]
    return found[-1] if found else None


def runscript(entry: Form, cmd: Form, shell: Sequence[str], workdir: str) -> List[str]:
    """Docker's ENTRYPOINT + CMD for ``apptainer run IMAGE ARGS``: ARGS replace CMD and
    follow an exec-form ENTRYPOINT; a shell-form ENTRYPOINT takes neither."""
    lines = ["# Docker's ENTRYPOINT and CMD: arguments replace CMD."]
    if workdir != "/":
        lines.append(f"cd {shlex.quote(workdir)}")
    shell_q = " ".join(shlex.quote(a) for a in shell)
    if isinstance(entry, str):
        return lines + [f"exec {shell_q} {shlex.quote(entry)}"]
    default = cmd if isinstance(cmd, list) else [*shell, cmd] if cmd else []
    if default:
        lines.append('if [ "$#" -eq 0 ]; then set -- '
                     + " ".join(shlex.quote(a) for a in default) + "; fi")
    prefix = " ".join(shlex.quote(a) for a in entry or [])
    return lines + [f'exec {prefix} "$@"' if prefix else 'exec "$@"']
