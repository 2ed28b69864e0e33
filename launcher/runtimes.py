"""Container runtimes: how each one prepares a node, extends srun, and wraps a task's argv.

Where it sits: spec -> **runtimes** + modes -> jobscript text. A runtime is chosen
explicitly from the spec (``RUNTIMES[spec.runtime.kind]``); each returns argv lists of
shell tokens (launcher.shell) and never quotes anything itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Type, Union

from launcher import enroot, hangs_script
from launcher.requeue import MARKER_ENV, SIGNAL_ENV
from launcher.torchrun_jsc.forward import ENV as FORWARD_ENV
from launcher.shell import Assign, Raw, Statement, Token, Var, anchored, expansion, \
    expansion_parts, literal_or_word, word
from launcher.model import Bind, JobSpec, Runtime

PWD = Var("PWD")
DRIVER_CAPS = "NVIDIA_DRIVER_CAPABILITIES"
# Enroot and pyxis: the image's root is read-only (Enroot) and $HOME is not mounted (Enroot's
# ENROOT_MOUNT_HOME defaults to no), so the usual caches (~/.cache, ~/.triton) fail with EROFS.
# They go to a node-local per-user directory unless the user or site set them.
CACHE_ROOT = "TORCHRUN_JSC_CACHE"
CACHE_NAMES = (CACHE_ROOT, "XDG_CACHE_HOME", "TRITON_CACHE_DIR", "HF_HOME", "TORCH_HOME",
               "PIP_CACHE_DIR")
# What pyxis must not let the container's environment (an image ENV, Enroot's hooks such as
# 50-slurm-pytorch.sh) override in the task: the kit's rendezvous and socket interface.
KIT_NAMES = ("MASTER_ADDR", "MASTER_PORT", "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME",
             "NVIDIA_VISIBLE_DEVICES")
_GPU_SBATCH = ("gpus", "G", "gpus-per-task", "gpus-per-socket")


def gpus_requested(spec: JobSpec) -> bool:
    """job.gpus_per_node, or a GPU option in job.sbatch."""
    return spec.job.gpus_per_node > 0 or any(k in _GPU_SBATCH for k, _ in spec.job.sbatch)


def gpu_lines(spec: JobSpec) -> List[Statement]:
    """Enroot's nvidia hook gives an image without NVIDIA_DRIVER_CAPABILITIES only `utility`:
    no libcuda, torch sees no GPU and a job that falls back to CPU says nothing. Ask for
    compute unless the site or the user chose (env.set, site.env or the submit environment)."""
    if not gpus_requested(spec):
        return []
    return [Raw("# Enroot's nvidia hook: an image without NVIDIA_DRIVER_CAPABILITIES gets only "
                "`utility` (no libcuda)."),
            Raw(f'export {DRIVER_CAPS}="${{{DRIVER_CAPS}:-compute,utility}}"')]


def cache_lines() -> List[Statement]:
    """The caches' variables, each only where unset (docs/guide/runtimes.md: Caches)."""
    return [
        Raw("# Caches: the container's root is read-only and $HOME is not mounted, so Triton "
            "(torch.compile),\n# Hugging Face, torch hub and pip write to a node-local "
            "per-user directory unless set."),
        Raw(f'export {CACHE_ROOT}="${{{CACHE_ROOT}:-/tmp/torchrun-jsc-cache-$UID}}"'),
        Raw(f'export XDG_CACHE_HOME="${{XDG_CACHE_HOME:-${CACHE_ROOT}}}"'),
        Raw('export TRITON_CACHE_DIR="${TRITON_CACHE_DIR:-$XDG_CACHE_HOME/triton}" '
            'HF_HOME="${HF_HOME:-$XDG_CACHE_HOME/huggingface}" \\\n'
            '    TORCH_HOME="${TORCH_HOME:-$XDG_CACHE_HOME/torch}" '
            'PIP_CACHE_DIR="${PIP_CACHE_DIR:-$XDG_CACHE_HOME/pip}"'),
    ]

@dataclass(frozen=True)
class ContainerRuntime:
    """Base: the bare runtime. Subclasses override what they need."""

    spec: JobSpec

    @property
    def config(self) -> Runtime:
        return self.spec.runtime

    def batch_lines(self) -> List[Statement]:
        """Batch-scope statements this runtime needs (job-global values only)."""
        return []

    def setup_argv(self) -> List[Token]:
        """Argv run once per node before the launch, or [] for none."""
        return []

    def cwd_guard(self, pattern: str, chars: str) -> List[Statement]:
        """Fail loudly when the submit directory cannot be written as this runtime's bind."""
        if not self.config.bind_cwd:
            return []
        kind = self.config.kind
        return [Raw(f'case "$PWD" in *[{pattern}]*)\n'
                    f'    echo "{kind} cannot bind the submit directory $PWD ({chars})" >&2; '
                    'exit 1 ;;\nesac')]

    def srun_flags(self) -> List[Token]:
        """Extra flags for every srun that starts tasks of the program."""
        return []

    def wrap(self, argv: Sequence[Token], task_env: Sequence[str] = ()) -> List[Token]:
        """The argv that runs ``argv`` inside this runtime; task_env names must reach it."""
        return list(argv)

    @property
    def inherits_env(self) -> bool:
        """True when the task's environment reaches the program without help."""
        return True


class Bare(ContainerRuntime):
    pass


class Apptainer(ContainerRuntime):
    def batch_lines(self) -> List[Statement]:
        cache = self.config.cache_dir
        out = self.cwd_guard(":,", "it contains ':' or ','")
        return out + ([] if cache is None else
                      [Assign("APPTAINER_CACHEDIR", expansion(cache), export=True)])

    def wrap(self, argv: Sequence[Token], task_env: Sequence[str] = ()) -> List[Token]:
        nv = self.config.nv if self.config.nv is not None else self.spec.job.gpus_per_node > 0
        out: List[Token] = ["apptainer", "exec"]
        if nv:
            out.append("--nv")
        for bind in self.config.binds:
            out += ["--bind", _bind_text(bind, "ro")]
        if self.config.bind_cwd:
            out += ["--bind", PWD]
        assert self.config.image is not None  # the spec loader requires it
        return out + [expansion(self.config.image), *argv]


class Enroot(ContainerRuntime):
    def batch_lines(self) -> List[Statement]:
        out: List[Statement] = self.cwd_guard("[:space:]:,", "it contains whitespace, ':' or ','")
        path, lines = enroot.data_path_word(self.config.data_path or enroot.DEFAULT_DATA_PATH)
        out += [Raw(line) for line in lines]
        out.append(Assign("ENROOT_DATA_PATH", path, export=True))
        out += gpu_lines(self.spec) + cache_lines()
        out += _stamped_name(self.config.container_name, self.config.image)
        run = word(Var("enroot_name"), ".job", Var("SLURM_JOB_ID")) if self.config.writable \
            else Var("enroot_name")
        out += [Assign("enroot_run", run),
                Raw("# shellcheck disable=SC2016  # expanded on each node and task, not here"),
                Assign("enroot_setup", enroot.SETUP),
                Raw("# shellcheck disable=SC2016"),
                Assign("enroot_start", enroot.start_script(self._names(), cache=True))]
        return out

    def _names(self) -> List[str]:
        """What reaches the container by name: Slurm's, the GPUs', every name the script
        exports (env.set, site.env, the site's socket interface, the task script's, the
        requeue protocol's, the hang hook's: launcher.hangs_script) and env.pass."""
        names = set(enroot.TASK_NAMES) | set(self.spec.env.names) \
            | {n for n, _ in self.spec.site.env} | set(_requeue_names(self.spec)) \
            | set(CACHE_NAMES) | set(hangs_script.NAMES)
        if gpus_requested(self.spec):
            names.add(DRIVER_CAPS)
        if self.spec.site.socket_ifname:
            names |= {"GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"}
        return sorted(names | set(self.spec.env.passthrough))

    def setup_argv(self) -> List[Token]:
        return ["bash", "-c", Var("enroot_setup"), "enroot-setup", Var("enroot_image"),
                Var("enroot_name"), str(self.config.keep_old), Var("enroot_run")]

    def wrap(self, argv: Sequence[Token], task_env: Sequence[str] = ()) -> List[Token]:
        # Read-only unless runtime.writable (then a per-job copy): no job writes into a
        # container that a later job starts.
        out: List[Token] = ["bash", "-c", Var("enroot_start"), "enroot-start"]
        if self.config.writable:
            out.append("--rw")
        for bind in self.config.binds:
            out += ["--mount", _bind_text(bind, "none:x-create=auto,rbind,ro")]
        if self.config.bind_cwd:
            out += ["--mount", word(PWD, ":", PWD)]
        out += [Var("enroot_run"), "env", word("--chdir=", PWD)]
        return out + list(argv)

    @property
    def inherits_env(self) -> bool:
        return False


def _requeue_names(spec: JobSpec) -> Sequence[str]:
    # Exported by launcher.requeue_script; read by torchrun_jsc and launcher.requeue.
    if spec.job.requeue is None:
        return ()
    return (MARKER_ENV, SIGNAL_ENV, FORWARD_ENV)


class Pyxis(ContainerRuntime):
    def batch_lines(self) -> List[Statement]:
        out = self.cwd_guard("[:space:]:,", "it contains whitespace, ':' or ','")
        local = _local_squashfs(self.config.image)
        if local is not None:  # a registry image's name cannot carry a stamp
            out += _stamped_name(self.config.container_name, local)
            out += [Raw("# shellcheck disable=SC2016  # expanded on each node, not here"),
                    Assign("pyxis_setup", enroot.PYXIS_SETUP)]
        # pyxis hands the step's environment to Enroot's hooks: the GPUs Slurm gave the job on
        # this node, never the image's `all`, `void` when none.
        out += [Raw('export NVIDIA_VISIBLE_DEVICES="${SLURM_JOB_GPUS:-void}"')]
        # A --container-env given on the command line replaces the site's or user's
        # PYXIS_CONTAINER_ENV: keep those names too.
        out += gpu_lines(self.spec) + cache_lines()
        return out + [Raw('pyxis_env_more="${PYXIS_CONTAINER_ENV:+,$PYXIS_CONTAINER_ENV}"')]

    def container_env(self) -> List[str]:
        """The names whose task value pyxis keeps over the container's environment: the
        kit's rendezvous, socket interfaces and GPU selection, the caches, the requeue
        protocol's, every name the spec or site exports and env.pass's exact names."""
        names = set(KIT_NAMES) | set(CACHE_NAMES) | set(self.spec.env.names) \
            | {n for n, _ in self.spec.site.env} | set(_requeue_names(self.spec)) \
            | {n for n in self.spec.env.passthrough if "*" not in n}
        if gpus_requested(self.spec):
            names.add(DRIVER_CAPS)
        return sorted(names)

    def setup_argv(self) -> List[Token]:
        # A local image: the kit creates pyxis' container on each node (enroot.PYXIS_SETUP).
        if _local_squashfs(self.config.image) is None:
            return []
        return ["bash", "-c", Var("pyxis_setup"), "pyxis-setup", Var("enroot_image"),
                Var("enroot_name"), str(self.config.keep_old)]

    def srun_flags(self) -> List[Token]:
        image = self.config.image
        assert image is not None  # the spec loader requires it
        # pyxis resolves a relative squashfs path against the step's directory, which need
        # not be ours: anchor it to the submit directory explicitly.
        local = image.endswith((".sqsh", ".squashfs")) and not anchored(image)
        out: List[Token] = [literal_or_word("--container-image=", PWD, "/", *expansion_parts(image))
                            if local else literal_or_word("--container-image=", *expansion_parts(image))]
        mounts = [_bind_parts(b, "ro") for b in self.config.binds]
        if mounts or self.config.bind_cwd:
            parts: List[Union[str, Var]] = ["--container-mounts="]
            for i, mount in enumerate(mounts):
                parts += ([","] if i else []) + mount
            if self.config.bind_cwd:
                parts += ["," if mounts else "", PWD, ":", PWD]
            out.append(literal_or_word(*parts))
        out.append(word("--container-workdir=", PWD))
        out.append(word("--container-env=" + ",".join(self.container_env()),
                        Var("pyxis_env_more")))
        if _local_squashfs(image) is not None:
            out.append(word("--container-name=", Var("enroot_name")))
        else:
            out.append(f"--container-name={self.config.container_name or _stem(image)}")
        return out


def _local_squashfs(image: Optional[str]) -> Optional[str]:
    return image if image and image.endswith((".sqsh", ".squashfs")) else None


def _stamped_name(name: Optional[str], image: Optional[str]) -> List[Statement]:
    """enroot_name=NAME-SIZE-MTIME: a rebuilt image gets a fresh container, an unchanged one
    is reused by later jobs (both pyxis and Enroot keep named containers across jobs)."""
    assert image is not None  # the spec loader requires it
    return [Assign("enroot_image", expansion(image)),
            Raw('enroot_stamp="$(stat -L -c %s-%Y -- "$enroot_image")"'),
            Assign("enroot_name", word(name or _stem(image), "-", Var("enroot_stamp")))]


def _bind_parts(bind: Bind, ro_flag: str) -> List[Union[str, Var]]:
    parts = [*expansion_parts(bind.source), ":", *expansion_parts(bind.target)]
    return parts + [f":{ro_flag}"] if bind.read_only else parts


def _bind_text(bind: Bind, ro_flag: str) -> Token:
    return literal_or_word(*_bind_parts(bind, ro_flag))


def _stem(image: str) -> str:
    name = image.rstrip("/").rsplit("/", 1)[-1].rsplit("#", 1)[-1]
    for ext in (".sqsh", ".sif", ".squashfs"):
        if name.endswith(ext):
            name = name[: -len(ext)]
    clean = "".join(c if c.isalnum() or c in "_.-" else "_" for c in name)
    return clean or "container"


RUNTIMES: Dict[str, Type[ContainerRuntime]] = {
    "bare": Bare,
    "apptainer": Apptainer,
    "enroot": Enroot,
    "pyxis": Pyxis,
}


def runtime_for(spec: JobSpec) -> ContainerRuntime:
    """The runtime object the spec names."""
    return RUNTIMES[spec.runtime.kind](spec)
