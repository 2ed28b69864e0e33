"""ENTRYPOINT + CMD -> %runscript with Docker's rules, and the final stage's %labels.

Where it sits: part of ``launcher.dockerfile.render`` (the final stage only). Docker's rules:
``docker run IMAGE ARGS`` replaces CMD with ARGS and keeps an exec-form ENTRYPOINT; a
shell-form ENTRYPOINT takes neither; a shell-form CMD runs under SHELL (``/bin/sh -c``); the
container starts in WORKDIR. ``apptainer run IMAGE ARGS`` does the same with this runscript.
CMD and ENTRYPOINT come from spython's parse of the stage (launcher.dockerfile.spython). A CMD
without ENTRYPOINT runs under the base image's ENTRYPOINT, as Docker runs it: the final
stage's %post records it from the runscript Apptainer wrote for the base (OCI_ENTRYPOINT).
"""

from __future__ import annotations

import shlex
from typing import List, Optional, Sequence, Tuple

from launcher.dockerfile.lexer import Instruction
from launcher.dockerfile.spython import Form, stage_values
from launcher.dockerfile.stages import Stage


BASE_ENTRY = "/.singularity.d/dockerfile-base-entrypoint"


def entry_and_cmd(stage: Stage) -> Tuple[Form, Form]:
    """The stage's ENTRYPOINT and CMD (an ENTRYPOINT resets a CMD it inherits, as Docker)."""
    values = stage_values(stage.instructions)
    cmd, entry = values.cmd, values.entrypoint
    entry_index = _last(stage.instructions, "ENTRYPOINT")
    cmd_index = _last(stage.instructions, "CMD")
    if entry_index is not None and cmd_index is not None and cmd_index < stage.inherited <= \
            entry_index:
        cmd = None
    return entry, cmd


def keeps_base_entrypoint(stage: Stage) -> bool:
    """CMD without ENTRYPOINT: Docker runs CMD under the base image's ENTRYPOINT."""
    entry, cmd = entry_and_cmd(stage)
    return entry is None and cmd is not None and stage.base.bootstrap != "scratch"


def base_entrypoint_post(stage: Stage) -> List[str]:
    """%post lines that keep the base image's ENTRYPOINT as Apptainer recorded it (the
    OCI_ENTRYPOINT line of the runscript it writes for an OCI image; none for another)."""
    if not keeps_base_entrypoint(stage):
        return []
    return ["# Docker runs CMD under the base image's ENTRYPOINT: keep the one Apptainer "
            "recorded.",
            "OCI_ENTRYPOINT=",
            "eval \"$(grep '^OCI_ENTRYPOINT=' /.singularity.d/runscript 2>/dev/null || true)\"",
            f"printf '%s\\n' \"$OCI_ENTRYPOINT\" >{BASE_ENTRY}"]


def final_sections(stage: Stage, state, source: str, notes: List[str]) -> List[str]:
    out: List[str] = []
    if state.labels:
        out += ["", "%labels"] + [f"    {k} {v}" for k, v in state.labels]
    entry, cmd = entry_and_cmd(stage)
    if entry is None and cmd is None:
        if state.workdir_set:
            notes.append(f"{source}: no CMD or ENTRYPOINT: apptainer run starts the base "
                         f"image's own, in the calling directory, not in {state.workdir}")
        return out
    lines = runscript(entry, cmd, state.shell, state.workdir, keeps_base_entrypoint(stage))
    return out + ["", "%runscript"] + [f"    {line}" for line in lines]


def _last(instructions: Sequence[Instruction], keyword: str) -> Optional[int]:
    found = [i for i, ins in enumerate(instructions) if ins.keyword == keyword]
    return found[-1] if found else None


def runscript(entry: Form, cmd: Form, shell: Sequence[str], workdir: str,
              base_entry: bool = False) -> List[str]:
    """Docker's ENTRYPOINT + CMD for ``apptainer run IMAGE ARGS``: ARGS replace CMD and
    follow an exec-form ENTRYPOINT (or, ``base_entry``, the base image's, recorded by
    base_entrypoint_post); a shell-form ENTRYPOINT takes neither."""
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
    if base_entry:
        lines.append(f'eval "set -- $(cat {BASE_ENTRY} 2>/dev/null) \\"\\$@\\""')
    prefix = " ".join(shlex.quote(a) for a in entry or [])
    return lines + [f'exec {prefix} "$@"' if prefix else 'exec "$@"']
