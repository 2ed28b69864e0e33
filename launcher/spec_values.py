"""Spec values that may use the job's environment, and those that may not.

Where it sits: **spec** (called by launcher.spec, spec_site, spec_runtime) -> shell
(``expansion``) -> jobscript text. Paths and program arguments (program, launch.command,
runtime.image, runtime.binds, runtime.cache_dir, site.venv, site.venv_build.pip_options and
.horovod.nccl_home) may write ``$NAME``, ``${NAME}`` or a leading ``~/``: they are expanded
on the node when the script runs, where the job's environment is ($SCRATCH, $PROJECT,
$HOME); ``$$`` is a literal '$' and every other character reaches the program unchanged.
docs/guide/spec-values.md lists every key.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["anchored", "expandable", "literal"]

from launcher.shell import anchored, expansion_names
from launcher.yamlread import Reader

# ${ not followed by NAME}: a shell operator such as ${X:-default} that is not expanded here.
_BAD_BRACE = re.compile(r"(?<!\$)(?:\$\$)*\$\{(?![A-Za-z_][A-Za-z0-9_]*\})")
# Variables whose value differs between the tasks or nodes of a job. The spec's $VARs are
# expanded once, by the batch script on the first node, so every rank would get the first
# task's value (srun mode: --rank $SLURM_PROCID would be 0 everywhere): refused.
_PER_TASK = re.compile(r"(SLURM_(PROCID|LOCALID|NODEID|STEP_\w+|TASK_PID|GTIDS|CPU_BIND\w*"
                       r"|TOPOLOGY_ADDR\w*|LAUNCH_NODE_IPADDR)|SLURMD_NODENAME|RANK|LOCAL_RANK"
                       r"|GROUP_RANK|ROLE_RANK|LOCAL_WORLD_SIZE|WORLD_SIZE|CUDA_VISIBLE_DEVICES"
                       r"|OMPI_COMM_WORLD_\w+|PMI_\w+|PMIX_\w+|HOSTNAME)\Z")


def expandable(r: Reader, path: str, text: str) -> str:
    """A value expanded at run time: refuse the shell forms it does not expand, and the
    variables that differ from task to task."""
    if _BAD_BRACE.search(text):
        raise r.fail(path, "only $NAME and ${NAME} are expanded (at run time, on the node); "
                     "${NAME:-...} and other operators are not: write the value, or '$$' "
                     "for a literal '$'", text)
    for name in expansion_names(text):
        if _PER_TASK.match(name):
            raise r.fail(path, f"${name} differs between tasks and nodes, but the spec's "
                         "$VARs are expanded once, in the batch script on the first node: read "
                         f"{name} in your program (os.environ), or write '$${name}' for a "
                         "literal '$'", text)
    return text


def literal(r: Reader, path: str, value: Any) -> None:
    """A value written into the script literally: refuse '$' and a leading '~'."""
    if isinstance(value, str) and ("$" in value or value.startswith("~/")):
        raise r.fail(path, "is used literally: '$VAR' and '~' are not expanded here; write "
                     "the value itself (docs/guide/spec-values.md lists the keys that expand them)",
                     value)
