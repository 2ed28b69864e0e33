"""Container runtimes: how each one prepares a node, extends srun, and wraps a task's argv.

Where it sits: spec -> **runtimes** + plans -> jobscript text. A runtime is chosen
explicitly from the spec (``RUNTIMES[spec.runtime.kind]``); each returns argv lists of
shell tokens (launcher.shell) and never quotes anything itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Sequence, Type, Union

from launcher.shell import Assign, Raw, Statement, Token, Var, collect_env, word
from launcher.model import Bind, JobSpec, Runtime

PWD = Var("PWD")

# Runs once per node (srun --ntasks-per-node=1): create the Enroot container unless a
# previous job already did. A node-local flock serialises the tasks of one node; when the
# data path is shared, a concurrent creator elsewhere makes `create` fail with "exists",
# which the final check accepts.
ENROOT_SETUP = """set -euo pipefail
image=$1 name=$2
exists() { enroot list | grep -qxF -- "$name"; }
if exists; then echo "enroot: reusing container $name on $(hostname)"; exit 0; fi
exec 9>"/tmp/enroot-create-$name.lock"
flock 9
if exists; then exit 0; fi
echo "enroot: creating container $name from $image on $(hostname)"
enroot create --name "$name" -- "$image" || exists"""


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
        return out + ([] if cache is None else [Assign("APPTAINER_CACHEDIR", cache, export=True)])

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
        return out + [self.config.image, *argv]


class Enroot(ContainerRuntime):
    def batch_lines(self) -> List[Statement]:
        image = self.config.image
        assert image is not None  # the spec loader requires it
        out: List[Statement] = self.cwd_guard("[:space:]:,", "it contains whitespace, ':' or ','")
        if self.config.data_path is not None:
            out.append(Assign("ENROOT_DATA_PATH", self.config.data_path, export=True))
        # The name carries the image's size and mtime, so a rebuilt image gets a fresh
        # container while an unchanged one is reused by later jobs.
        base = self.config.container_name or _stem(image)
        out += [Assign("enroot_image", image),
                Raw('enroot_stamp="$(stat -L -c %s-%Y -- "$enroot_image")"'),
                Assign("enroot_name", word(base, "-", Var("enroot_stamp"))),
                Raw("# shellcheck disable=SC2016  # expanded on each node, not here"),
                Assign("enroot_setup", ENROOT_SETUP)]
        if self.spec.env.passthrough:
            out.append(collect_env("enroot_pass", self.spec.env.passthrough, "--env"))
        return out

    def setup_argv(self) -> List[Token]:
        return ["bash", "-c", Var("enroot_setup"), "enroot-setup", Var("enroot_image"),
                Var("enroot_name")]

    def wrap(self, argv: Sequence[Token], task_env: Sequence[str] = ()) -> List[Token]:
        out: List[Token] = ["enroot", "start", "--root", "--rw"]
        for bind in self.config.binds:
            out += ["--mount", _bind_text(bind, "none:x-create=auto,rbind,ro")]
        if self.config.bind_cwd:
            out += ["--mount", word(PWD, ":", PWD)]
        # Enroot starts from the image's /etc/environment, not from the task's environment.
        names = sorted(set(self.spec.env.names) | {n for n, _ in self.spec.site.env}
                       | set(task_env) | set(self._requeue_names()))
        for name in names:
            out += ["--env", name]
        if self.spec.env.passthrough:
            out.append(Var("enroot_pass", array=True))
        out += [Var("enroot_name"), "env", word("--chdir=", PWD)]
        return out + list(argv)

    @property
    def inherits_env(self) -> bool:
        return False

    def _requeue_names(self) -> Sequence[str]:
        # Exported by launcher.requeue_script; read by torchrun_jsc and launcher.requeue.
        if self.spec.job.requeue is None:
            return ()
        return ("REQUEUE_MARKER", "REQUEUE_SIGNAL", "TORCHRUN_JSC_FORWARD_SIGNALS")


class Pyxis(ContainerRuntime):
    def batch_lines(self) -> List[Statement]:
        return self.cwd_guard("[:space:]:,", "it contains whitespace, ':' or ','")

    def srun_flags(self) -> List[Token]:
        image = self.config.image
        assert image is not None  # the spec loader requires it
        # pyxis resolves a relative squashfs path against the step's directory, which need
        # not be ours: anchor it to the submit directory explicitly.
        local = image.endswith((".sqsh", ".squashfs")) and not image.startswith("/")
        out: List[Token] = [word("--container-image=", PWD, "/", image) if local
                            else f"--container-image={image}"]
        mounts = [_bind_text(b, "ro") for b in self.config.binds]
        if mounts or self.config.bind_cwd:
            parts: List[Union[str, Var]] = ["--container-mounts=", ",".join(mounts)]
            if self.config.bind_cwd:
                parts += ["," if mounts else "", PWD, ":", PWD]
            out.append(word(*parts))
        out.append(word("--container-workdir=", PWD))
        name = self.config.container_name or _stem(image)
        out.append(f"--container-name={name}")
        return out


def _bind_text(bind: Bind, ro_flag: str) -> str:
    text = f"{bind.source}:{bind.target}"
    return f"{text}:{ro_flag}" if bind.read_only else text


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
