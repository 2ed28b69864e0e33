"""Runtime enroot: the kit creates the container from a squashfs once per node (``enroot
create``, launcher/runtimes/enroot_scripts.py SETUP) and starts each task in it (``enroot
start``, forwarding the task's variables by name: Enroot passes none by itself). The data
path is Enroot's own (the site's enroot.conf) unless ``runtime.data_path`` sets one.

Images: a local squashfs file only (``enroot create`` reads nothing else; registry images
are imported first, or run with pyxis). Binds are ``--mount SRC:DST:FLAGS``, split on ':'
and ',' and whitespace, so a bound path cannot hold them.
"""

from __future__ import annotations

from typing import List, Optional, Sequence

from launcher import kit
from launcher.runtimes import enroot_scripts
from launcher.runtimes.base import CACHE_NAMES, DRIVER_CAPS, HASH_REF, PWD, SCHEME, SQUASHFS, \
    STAGED, ContainerRuntime, bind_text, cache_lines, gpu_lines, gpus_requested, \
    stage_create_lines, stamped_name
from launcher.shell import Assign, Raw, Statement, Token, Var, word


class Enroot(ContainerRuntime):
    kind = "enroot"
    keys = ("kind", "image", "binds", "bind_cwd", "container_name", "data_path", "writable",
            "keep_old", "stage")
    bind_rule = enroot_scripts.MOUNT_RULE

    @classmethod
    def image_problem(cls, image: str) -> Optional[str]:
        if SCHEME.match(image) or HASH_REF.match(image):
            return ("the enroot runtime creates its container from a local squashfs file "
                    "(enroot create); import it first (enroot import -o image.sqsh "
                    "'docker://REGISTRY#IMAGE') or use kind: pyxis for registry images")
        if not image.endswith(SQUASHFS):
            what = "cannot read SIF images" if image.endswith(".sif") else "reads squashfs only"
            return (f"enroot create {what}: the image must be a squashfs file ending in .sqsh or "
                    ".squashfs (make enroot-image, or enroot import)")
        return None

    def batch_lines(self) -> List[Statement]:
        out: List[Statement] = self.cwd_guard() + self.image_guard(self.config.image)
        if self.config.data_path:  # else Enroot's own config decides (the site's enroot.conf)
            path, lines = enroot_scripts.data_path_word(self.config.data_path)
            out += [Raw(line) for line in lines]
            out.append(Assign("ENROOT_DATA_PATH", path, export=True))
        else:
            out.append(Raw("# ENROOT_DATA_PATH: Enroot's config decides (the site's enroot.conf, else "
                           "~/.local/share/enroot); runtime.data_path sets it"))
        out += gpu_lines(self.spec) + cache_lines()
        out += stamped_name(self.config.container_name, self.config.image)
        out += stage_create_lines(self.kind, self.config.stage)
        run = word(Var("enroot_name"), ".job", Var("SLURM_JOB_ID")) if self.config.writable \
            else Var("enroot_name")
        out += [Assign("enroot_run", run), *(Raw(line) for line in enroot_scripts.JOBS_LINES),
                Raw("# What reaches the container, by name (Enroot passes nothing by itself)."),
                Assign("enroot_names", " ".join(self._names()))]
        return out

    def _names(self) -> List[str]:
        """What reaches the container by name: Slurm's, the GPUs', the task scripts', the
        caches', and every name the plan says the job exports or forwards (env.set, site.env,
        env.pass, the site's socket interface, the requeue protocol's, the hang hook's)."""
        names = set(enroot_scripts.TASK_NAMES) | set(CACHE_NAMES) | set(self.exports) \
            | set(self.forwards)
        if gpus_requested(self.spec):
            names.add(DRIVER_CAPS)
        return sorted(names)

    def setup_argv(self) -> List[Token]:
        return ["bash", kit.file("node/enroot-setup.sh"), Var("enroot_image"),
                Var("enroot_name"), str(self.config.keep_old), Var("enroot_run"),
                Var(enroot_scripts.JOBS_VAR), *([STAGED] if self.config.stage else [])]

    def enter(self, argv: Sequence[Token], task_env: Sequence[str] = ()) -> List[Token]:
        # Read-only unless runtime.writable (then a per-job copy): no job writes into a
        # container that a later job starts.
        out: List[Token] = ["bash", kit.file("node/enroot-start.sh"), Var("enroot_names")]
        if self.config.writable:
            out.append("--rw")
        out += ["--mount", word(kit.KIT, ":", kit.KIT, ":none:x-create=auto,rbind,ro")]
        for bind in self.config.binds:
            out += ["--mount", bind_text(bind, "none:x-create=auto,rbind,ro")]
        if self.config.bind_cwd:
            out += ["--mount", word(PWD, ":", PWD)]
        out += [Var("enroot_run"), "env", word("--chdir=", PWD)]
        return out + list(argv)

    @property
    def inherits_env(self) -> bool:
        return False
