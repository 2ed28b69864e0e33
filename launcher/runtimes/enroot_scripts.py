"""Enroot's mount rule, the data-path placeholders and what the set-up needs from the batch
script, for the enroot and pyxis runtimes (launcher/runtimes/enroot.py, pyxis.py). The scripts
that run on the nodes are the kit's files: launcher/node/enroot-setup.sh, pyxis-setup.sh,
enroot-start.sh and enroot-lib.sh.

Where it sits: spec -> **runtimes (enroot, pyxis)** -> the job plan -> text. The scripts
run with ``bash "$kit/node/SCRIPT" ARGS...``: on each node once (create) and in each task
(start), so per-node and per-task values expand where they exist, never at batch scope.
What only the controller knows is asked once per job, at batch scope (JOBS_LINES), and handed
to the per-node set-up as an argument: never one controller query per node.
"""

from __future__ import annotations

import re
from typing import List, Tuple, Union

from launcher.runtimes.base import BindRule
from launcher.shell import Var, Word, word

# Enroot's --mount SRC:DST[:FLAGS] (and pyxis' --container-mounts, a ','-separated list of
# them) splits on ':', ',' and whitespace: a path that holds one cannot be mounted.
MOUNT_RULE = BindRule(":,", whitespace=True)

# The data path may name the user and the job through these placeholders only; the script
# fills them in on the node (never through a shell expansion written in the spec).
PLACEHOLDERS = {"user": Var("enroot_user"), "uid": Var("enroot_uid"),
                "job_id": Var("SLURM_JOB_ID")}
PLACEHOLDER_LINES = {"user": 'enroot_user="$(id -un)"', "uid": 'enroot_uid="$(id -u)"'}
_FIELD = re.compile(r"\{([^{}]*)\}")


def placeholder_problem(text: str) -> str:
    """Why ``text`` is not a valid data path, or '' when it is."""
    if any(c in text for c in "$`\\"):
        return "no shell expansion ('$', '`', '\\'): name the user or job with " + \
            ", ".join("{%s}" % k for k in PLACEHOLDERS)
    unknown = [m for m in _FIELD.findall(text) if m not in PLACEHOLDERS]
    if unknown or "{" in _FIELD.sub("", text) or "}" in _FIELD.sub("", text):
        return "the only placeholders are " + ", ".join("{%s}" % k for k in PLACEHOLDERS)
    return ""


def data_path_word(text: str) -> Tuple[Word, List[str]]:
    """The data path as a run-time word, and the batch lines its placeholders need."""
    parts: List[Union[str, Var]] = []
    used: List[str] = []
    for i, piece in enumerate(_FIELD.split(text)):
        if i % 2 == 0:
            parts.append(piece)
        else:
            parts.append(PLACEHOLDERS[piece])
            if piece in PLACEHOLDER_LINES and PLACEHOLDER_LINES[piece] not in used:
                used.append(PLACEHOLDER_LINES[piece])
    return word(*parts), used


# The user's jobs for the set-up (launcher/node/enroot-setup.sh), asked once per job here at batch scope (squeue is a query to the
# controller: once per node would be 1,000 at once on a 1,000-node job), `unknown` when squeue
# fails. It reaches the set-up as one argument, whose length Linux caps at 128 KiB: a longer
# list (some 14,000 jobs) counts as unknown too, rather than failing the job's set-up.
JOBS_VAR = "enroot_jobs"
JOBS_LINES = (
    'enroot_jobs="$(jsc_user_jobs)"  # asked once per job: the set-up keeps their containers',
)


# pyxis' container is marked complete inside its root filesystem as the set-up's last step
# (launcher/node/pyxis-setup.sh).
PYXIS_MARKER = "/.torchrun-jsc-created"


# Always forwarded: Slurm's variables (per-task ones included) and the GPU selection.
# Always forwarded when set in the task: Slurm's variables (per-task ones included), the GPU
# selection, and what the kit's task scripts export (ranks, rendezvous, socket interfaces).
TASK_NAMES = ("SLURM_*", "SLURMD_NODENAME", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES",
              "GPU_DEVICE_ORDINAL", "ROCR_VISIBLE_DEVICES", "RANK", "LOCAL_RANK",
              "WORLD_SIZE", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "GLOO_SOCKET_IFNAME",
              "NCCL_SOCKET_IFNAME", "OMPI_MCA_btl_tcp_if_include", "HOROVOD_GLOO_IFACE")
