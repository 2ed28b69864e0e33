"""Runtime pyxis: srun starts each task in the container (``srun --container-image=...``,
Slurm's SPANK plugin over Enroot); for a local squashfs the kit creates pyxis' named
container once per node first (launcher/runtimes/enroot_scripts.py PYXIS_SETUP).

Images: [USER@][REGISTRY#]IMAGE[:TAG] (docker://, dockerd://, podman:// allowed) or a
squashfs file; the image's ENTRYPOINT never runs (--no-container-entrypoint). Binds go into
--container-mounts (split on ':', ',' and whitespace). What it can run: only what srun
starts, so not mpirun (Open MPI's daemons are started without the container flags) and not
submitit (which quotes its srun flags); the task script runs inside the container, bash
included.
"""

from __future__ import annotations

from typing import List, Optional, Union

from launcher import kit
from launcher.runtimes import enroot_scripts
from launcher.runtimes.base import CACHE_NAMES, DRIVER_CAPS, PWD, REGISTRY_SLASH, SCHEME, \
    SQUASHFS, STAGED, ContainerRuntime, bind_parts, cache_lines, gpu_lines, gpus_requested, \
    local_squashfs, stage_create_lines, stamped_name, stem
from launcher.shell import Raw, Statement, Token, Var, anchored, expansion_parts, \
    literal_or_word, word

# What pyxis must not let the container's environment (an image ENV, Enroot's hooks such as
# 50-slurm-pytorch.sh) override in the task: the kit's rendezvous and socket interface.
KIT_NAMES = ("MASTER_ADDR", "MASTER_PORT", "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME",
             "NVIDIA_VISIBLE_DEVICES")
_SCHEMES = ("docker", "dockerd", "podman")


class Pyxis(ContainerRuntime):
    kind = "pyxis"
    keys = ("kind", "image", "binds", "bind_cwd", "container_name", "keep_old", "stage")
    bind_rule = enroot_scripts.MOUNT_RULE
    task_script_inside = True
    mpirun_problem = "pyxis containers start only through srun"
    submitit_problem = (
        "pyxis takes the container through srun flags, and submitit writes its srun "
        "flags shell-quoted, so the container name stamped on the node and the $PWD "
        "mount the composer uses cannot be expanded there; use runtime kind enroot "
        "(the same squashfs, started by enroot) or apptainer")

    @classmethod
    def image_problem(cls, image: str) -> Optional[str]:
        scheme = SCHEME.match(image)
        if scheme and scheme[1] not in _SCHEMES:
            return (f"pyxis cannot import {scheme[1]}:// images; it takes "
                    "[USER@][REGISTRY#]IMAGE[:TAG] (docker://, dockerd://, podman:// allowed) "
                    "or a squashfs file")
        if image.endswith(".sif"):
            return "pyxis cannot run SIF images; use a squashfs file (.sqsh) or a registry image"
        ref = image[scheme.end():] if scheme else image
        slash = REGISTRY_SLASH.match(ref)
        if slash and "#" not in ref and not image.endswith(SQUASHFS) \
                and not image.startswith(("/", "./", "../")):
            fixed = image.replace(slash[2] + "/", slash[2] + "#", 1)
            return (f"pyxis separates the registry with '#': write {fixed} (as written, "
                    f"{slash[2]} would be taken as a Docker Hub user)")
        return None

    def batch_lines(self) -> List[Statement]:
        local = local_squashfs(self.config.image)
        out = self.cwd_guard() + self.image_guard(local)
        if local is not None:  # a registry image's name cannot carry a stamp
            out += stamped_name(self.config.container_name, local)
            out += stage_create_lines(self.kind, self.config.stage)
        # pyxis hands the step's environment to Enroot's hooks: the GPUs Slurm gave the job on
        # this node, never the image's `all`, `void` when none.
        out += [Raw('export NVIDIA_VISIBLE_DEVICES="${SLURM_JOB_GPUS:-void}"')]
        # A --container-env given on the command line replaces the site's or user's
        # PYXIS_CONTAINER_ENV: keep those names too.
        out += gpu_lines(self.spec) + cache_lines()
        return out + [Raw('pyxis_env_more="${PYXIS_CONTAINER_ENV:+,$PYXIS_CONTAINER_ENV}"')]

    def container_env(self) -> List[str]:
        """The names whose task value pyxis keeps over the container's environment: the
        kit's rendezvous, socket interfaces and GPU selection, the caches, and the names the
        plan says the job exports (env.set, site.env, env.pass's exact names, the requeue
        protocol's)."""
        names = set(KIT_NAMES) | set(CACHE_NAMES) | set(self.exports)
        if gpus_requested(self.spec):
            names.add(DRIVER_CAPS)
        return sorted(names)

    def setup_argv(self) -> List[Token]:
        # A local image: the kit creates pyxis' container on each node (PYXIS_SETUP).
        if local_squashfs(self.config.image) is None:
            return []
        return ["bash", kit.file("node/pyxis-setup.sh"), Var("enroot_image"),
                Var("enroot_name"), str(self.config.keep_old),
                *([STAGED] if self.config.stage else [])]

    def srun_flags(self) -> List[Token]:
        image = self.config.image
        assert image is not None  # the spec loader requires it
        # pyxis resolves a relative squashfs path against the step's directory, which need
        # not be ours: anchor it to the submit directory explicitly.
        local = image.endswith(SQUASHFS) and not anchored(image)
        out: List[Token] = [literal_or_word("--container-image=", PWD, "/", *expansion_parts(image))
                            if local else literal_or_word("--container-image=", *expansion_parts(image))]
        # The kit first (read-only at its own path: its task scripts, torchrun_jsc, the hook).
        mounts = [[kit.KIT, ":", kit.KIT, ":ro"]] + [bind_parts(b, "ro") for b in self.config.binds]
        if self.config.bind_cwd:
            mounts.append([PWD, ":", PWD])
        parts: List[Union[str, Var]] = ["--container-mounts="]
        for i, mount in enumerate(mounts):
            parts += ([","] if i else []) + mount
        out.append(literal_or_word(*parts))
        out.append(word("--container-workdir=", PWD))
        out.append(word("--container-env=" + ",".join(self.container_env()),
                        Var("pyxis_env_more")))
        if local_squashfs(image) is not None:
            out.append(word("--container-name=", Var("enroot_name")))
        else:
            out.append(f"--container-name={self.config.container_name or stem(image)}")
        # The kit's command, never the image's ENTRYPOINT (one that does not exec its
        # arguments would stop the container's start), whatever the site's plugstack
        # execute_entrypoint or PYXIS_CONTAINER_ENTRYPOINT say (pyxis >= 0.8; the kit already
        # needs >= 0.15 for --container-env).
        out.append("--no-container-entrypoint")
        return out
