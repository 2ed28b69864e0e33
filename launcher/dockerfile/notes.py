"""The instructions Apptainer has no equivalent for: one line each saying what it does
instead. None of them becomes a command in %post (spython 0.3.14 turns USER into ``su`` and
HEALTHCHECK into a %test that cannot run; tests/unit/test_dockerfile.py pins that).

Where it sits: ``launcher.dockerfile.render`` asks ``note`` for every instruction it does not
carry over and collects the lines; the CLI prints them on stderr.
"""

from __future__ import annotations

from typing import List, Optional

from launcher.dockerfile.lexer import Instruction, exec_form

INSTEAD = {
    "USER": "the image runs as the calling user under Apptainer (and under Enroot/pyxis); "
            "RUN lines after it ran as root in the build",
    "EXPOSE": "no port mapping under Apptainer: the program listens on the node's own "
              "network, at the port it opens",
    "HEALTHCHECK": "no health checks under Apptainer: run the check yourself with "
                   "apptainer exec IMAGE ...",
    "VOLUME": "no volumes under Apptainer: bind a directory at run time (apptainer run --bind "
              "DIR:PATH, runtime.binds in a kit spec); the directory is made in the image",
    "ONBUILD": "no build triggers in Apptainer: ignored (it would run in images built FROM "
               "this one)",
    "STOPSIGNAL": "the runtime stops the program with SIGTERM (a kit job forwards Slurm's "
                  "signal to the program): use signal handling for SIGTERM",
}


def note(ins: Instruction, where: str) -> Optional[str]:
    """The one line for an instruction that does not carry over, or None if unknown."""
    instead = INSTEAD.get(ins.keyword)
    if instead is None:
        return None
    shown = " ".join(ins.text.split())
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return f"{where} {shown}: not carried over: {instead}"


def volume_paths(text: str) -> List[str]:
    """VOLUME's paths: the exec form's list, else the words."""
    listed = exec_form(text)
    return listed if listed is not None else text.split()
