"""Runtime apptainer: each task runs in ``apptainer exec [--nv] --bind ... IMAGE``.

Images: a .sif file, a sandbox directory, a squashfs file or a docker://, library://, oras://,
shub://, http(s):// reference. Binds are written SRC:DST[:ro] and separated by ',', so
neither ':' nor ',' can be in a bound path. Nothing to set up per node; the task's
environment reaches the program (Apptainer passes it on). ``runtime.stage``: an image file
is broadcast to every node's local storage first (sbcast) and every step runs that copy
(launcher/node/job.sh ``jsc_stage``).
"""

from __future__ import annotations

from typing import List, Optional, Sequence

from launcher.runtimes.base import HASH_REF, PWD, REGISTRY_SLASH, SCHEME, SQUASHFS, STAGED, \
    BindRule, ContainerRuntime, bind_text, stage_lines
from launcher.kit import KIT
from launcher.shell import Assign, Statement, Token, expansion, word

_SCHEMES = ("docker", "library", "oras", "shub", "http", "https")


class Apptainer(ContainerRuntime):
    kind = "apptainer"
    keys = ("kind", "image", "binds", "bind_cwd", "nv", "cache_dir", "stage")
    bind_rule = BindRule(":,")

    @classmethod
    def image_problem(cls, image: str) -> Optional[str]:
        scheme = SCHEME.match(image)
        if scheme and scheme[1] not in _SCHEMES:
            return (f"apptainer cannot run {scheme[1]}:// images; it takes a .sif file, a "
                    "sandbox directory, a squashfs file or docker://, library://, oras://, "
                    "shub://, http(s):// references")
        if HASH_REF.match(image[scheme.end():] if scheme else image):
            return ("'#' separates the registry only for Enroot/pyxis; apptainer takes "
                    "docker://REGISTRY/IMAGE[:TAG], e.g. docker://nvcr.io/nvidia/pytorch:24.01")
        slash = REGISTRY_SLASH.match(image)
        if not scheme and slash and not image.endswith((".sif", *SQUASHFS)) \
                and not image.startswith(("/", "./", "../", "$", "~")):
            return (f"apptainer would read this registry reference as a file path; pull it on "
                    f"the login node (apptainer pull image.sif docker://{image}) and name the "
                    ".sif file")
        return None

    def batch_lines(self) -> List[Statement]:
        cache = self.config.cache_dir
        out = self.cwd_guard() + self.image_guard(self.config.image)
        out += stage_lines(self.config.image, self.config.stage)
        return out + ([] if cache is None else
                      [Assign("APPTAINER_CACHEDIR", expansion(cache), export=True)])

    def local_exec(self, image: str, argv: Sequence[str]) -> Optional[List[str]]:
        return ["apptainer", "exec", "--cleanenv", image, *argv]

    def enter(self, argv: Sequence[Token], task_env: Sequence[str] = ()) -> List[Token]:
        nv = self.config.nv if self.config.nv is not None else self.spec.job.gpus_per_node > 0
        out: List[Token] = ["apptainer", "exec"]
        if nv:
            out.append("--nv")
        # The kit, read-only at its own path: its task scripts, torchrun_jsc, the stack hook.
        out += ["--bind", word(KIT, ":", KIT, ":ro")]
        for bind in self.config.binds:
            out += ["--bind", bind_text(bind, "ro")]
        if self.config.bind_cwd:
            out += ["--bind", PWD]
        assert self.config.image is not None  # the spec loader requires it
        image = STAGED if self.config.stage is not None else expansion(self.config.image)
        return out + [image, *argv]
