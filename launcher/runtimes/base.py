"""What a container runtime is: the class to subclass, THE per-node srun, the bind rule.

Where it sits: spec -> **runtimes** (the modes and the job plan ask them) -> text. A runtime is one module in
launcher/runtimes/ with one ``ContainerRuntime`` subclass, registered in
launcher/runtimes/__init__.py. It owns everything about itself: the spec keys it takes, the
image forms it can run and the characters it cannot bind (both checked when the spec is
loaded), its batch lines, its once-per-node set-up step, the srun flags and argv wrapping
that start a task in it, and what it can run (mpirun, the task script, submitit). Each
returns argv lists of shell tokens (launcher.shell) and never quotes anything itself.

A runtime knows nothing of the features (launcher/features/): the job plan (launcher.plan)
hands it the ``prelude`` every task of the launch starts through inside the container (the
stack hook's, features.hangs), which ``ContainerRuntime.wrap`` puts in front of the argv that
runs inside, one rule for every runtime, bare included; and the names the features export
to the tasks (``exports``: their value must win over the image's) and the ones that need only
reach them (``forwards``), which a runtime that passes nothing by itself forwards by name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar, List, Optional, Sequence, Tuple, Union

from launcher.shell import Assign, Raw, Statement, Token, Var, expansion, expansion_parts, \
    join, literal_or_word, word
from launcher.model import Bind, JobSpec, Runtime
from launcher.yamlread import Key

PWD = Var("PWD")
# Batch-scope variables of every jobscript (launcher.render.jobscript, launcher.submitit): the node
# count, and the CPUs of a one-task-per-node srun (set by launcher.features.placement).
NNODES = Var("nnodes")
CPUS_PER_NODE = Var("cpus_per_node")  # one task per node (set-up, doctor, per-node agent)
DRIVER_CAPS = "NVIDIA_DRIVER_CAPABILITIES"
# Enroot and pyxis: the image's root is read-only (Enroot) and $HOME is not mounted (Enroot's
# ENROOT_MOUNT_HOME defaults to no), so the usual caches (~/.cache, ~/.triton) fail with EROFS.
# They go to a node-local per-user directory unless the user or site set them.
CACHE_ROOT = "TORCHRUN_JSC_CACHE"
CACHE_NAMES = (CACHE_ROOT, "XDG_CACHE_HOME", "TRITON_CACHE_DIR", "HF_HOME", "TORCH_HOME",
               "PIP_CACHE_DIR")
_GPU_SBATCH = ("gpus", "G", "gpus-per-task", "gpus-per-socket")
# Image references, by form (nothing looks at the machine).
SCHEME = re.compile(r"([a-z][a-z0-9+.-]*)://")
# Enroot's and pyxis' registry form [USER@][REGISTRY#]IMAGE[:TAG]: '#' ends the registry.
HASH_REF = re.compile(r"([^/@#\s]+@)?[^/#\s]+#[^#\s]+\Z")
# A first path component that names a registry host (has a '.' or ':', or is localhost).
REGISTRY_SLASH = re.compile(r"([^/@#\s]+@)?([^/#\s]*[.:][^/#\s]*|localhost)/")
SQUASHFS = (".sqsh", ".squashfs")


# Every key of the runtime section, declared once (launcher.yamlread.Key); each runtime's
# ``keys`` names those it takes.
RUNTIME_KEYS = (
    Key(('runtime.kind',),
        '`bare` (default), `apptainer`, `enroot`, `pyxis`',
        'container runtime'),
    Key(('runtime.image',),
        'string, required for containers',
        'the forms the runtime can use (checked by form at `check` time, see '
        '[runtimes](../guide/runtimes.md)): apptainer `image.sif`, a sandbox directory, a squashfs'
        ' file, `docker://REGISTRY/IMAGE`, `library://`, `oras://`, `shub://`, `http(s)://`; '
        'enroot a local `.sqsh`/`.squashfs` file; pyxis `[USER@][REGISTRY#]IMAGE[:TAG]` '
        '(`docker://`, `dockerd://`, `podman://` allowed) or a `.sqsh`/`.squashfs` file'),
    Key(('runtime.binds',),
        'list of `{source, target (=source), read_only: false}` or a path string',
        'absolute paths; apptainer refuses `:` and `,`, enroot/pyxis also whitespace (their mount '
        'syntax cannot express them)'),
    Key(('runtime.binds[].source',),
        'absolute path, required',
        'the host path (a plain string item is the source)'),
    Key(('runtime.binds[].target',),
        'absolute path, = source',
        'the path inside the container'),
    Key(('runtime.binds[].read_only',),
        'false',
        'bind read-only'),
    Key(('runtime.bind_cwd',),
        'true',
        'bind the submit directory at the same path (the script fails loudly if its path cannot be'
        ' expressed)'),
    Key(('runtime.nv',),
        '`auto`',
        'apptainer `--nv`; `auto` = when `job.gpus_per_node > 0`'),
    Key(('runtime.cache_dir',),
        'unset',
        'apptainer: `APPTAINER_CACHEDIR`'),
    Key(('runtime.container_name',),
        'image stem',
        'enroot/pyxis container name; a local `.sqsh` image adds `-<size>-<mtime>`'),
    Key(('runtime.data_path',),
        "the site's (Enroot's config)",
        'enroot: exported as `ENROOT_DATA_PATH`, node-local and per user; unset: none is exported '
        "and Enroot's own config decides (the site's `enroot.conf`, else `~/.local/share/enroot`);"
        ' placeholders `{user}`, `{uid}`, `{job_id}` only (filled in on the node; `$` refused)'),
    Key(('runtime.writable',),
        'false',
        'enroot: start a per-job writable copy (`--rw`) instead of the shared read-only container'),
    Key(('runtime.stage',),
        '`false`, `true` or `{to}`',
        "copy the image file once per node to node-local storage with Slurm's tree broadcast "
        '(`sbcast`) before the launch and check its size on every node; apptainer runs that copy '
        'in every step and removes it at the end of the job; enroot and pyxis (a local squashfs) '
        'copy it only to the nodes that do not have the container yet and create it from there '
        '([staging](../guide/runtimes.md#staging-the-image-to-the-nodes))'),
    Key(('runtime.stage.to',),
        'absolute path, `/tmp`',
        'the node-local directory the copy goes to (it must exist on every node; `$VAR` is '
        'expanded on the batch host)'),
    Key(('runtime.keep_old',),
        '1',
        'enroot, pyxis (local image): containers of older images (same name) kept per node and '
        'user; the rest are removed'),
)


def node_srun(nodes: Var = NNODES, kill_on_bad_exit: bool = True) -> List[Token]:
    """THE srun that runs one task on every node of the allocation: the runtimes' set-up
    (``ContainerRuntime.setup_step``, in jobscripts and submitit) and the doctor's checks.

    ``--ntasks`` too: the job's SLURM_NTASKS (srun and horovod modes) would otherwise override
    --ntasks-per-node=1 ("can't honor --ntasks-per-node") and start the step once per task.
    ``kill_on_bad_exit``: one failing node ends the step at once (a set-up step: nothing can
    run without it); the doctor passes False so that every node still sends its report."""
    return ["srun", *(["--kill-on-bad-exit=1"] if kill_on_bad_exit else []),
            word("--nodes=", nodes), word("--ntasks=", nodes), "--ntasks-per-node=1",
            word("--cpus-per-task=", CPUS_PER_NODE)]


# What the shell's [:space:] class matches (C locale); a runtime's bind syntax that splits on
# whitespace cannot take any of them.
_SPACE = " \t\n\r\v\f"


@dataclass(frozen=True)
class BindRule:
    """The characters a runtime cannot put in a bind path (its bind syntax separates with
    them). The one rule behind the spec's bind check, submitit's folder check and the
    jobscript's guard on the submit directory (a shell glob generated from it)."""

    separators: str  # e.g. ":,"
    whitespace: bool = False

    @property
    def chars(self) -> str:
        return self.separators + (_SPACE if self.whitespace else "")

    def found(self, path: str) -> List[str]:
        """The characters of ``path`` this runtime cannot bind, as repr()s, in rule order."""
        return [repr(c) for c in self.chars if c in path]

    def glob(self) -> str:
        """A shell case pattern matching a path that holds any of them."""
        return f"*[{'[:space:]' if self.whitespace else ''}{self.separators}]*"

    def what(self) -> str:
        """'whitespace, ':' or ','' (for messages)."""
        words = (["whitespace"] if self.whitespace else []) + [repr(c) for c in self.separators]
        return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"


STAGED = Var("stage_image")  # the staged copy's path on every node (jsc_stage)


def stage_lines(image: Optional[str], to: Optional[str]) -> List[Statement]:
    """runtime.stage: the image copied to every node's ``to`` (launcher/node/job.sh
    ``jsc_stage``: sbcast, a size check on every node, removed at the job's end); STAGED names
    the copy. None when ``to`` is None."""
    if to is None or image is None:
        return []
    return [Raw(join(["jsc_stage", expansion(image), expansion(to)]) + " || exit 1  # "
                "runtime.stage: a copy on every node (sbcast), removed at the end")]


def stage_create_lines(kind: str, to: Optional[str]) -> List[Statement]:
    """runtime.stage for enroot and pyxis: the squashfs copied to the nodes whose set-up will
    create the container (launcher/node/job.sh ``jsc_stage_create``), which reads the copy
    (STAGED, its last argument) and removes it."""
    if to is None:
        return []
    return [Raw(join(["jsc_stage_create", kind, expansion(to)]) + " || exit 1  # "
                "runtime.stage: a copy where the container is created (sbcast)")]


def gpus_requested(spec: JobSpec) -> bool:
    """job.gpus_per_node, or a GPU option in job.sbatch."""
    return spec.job.gpus_per_node > 0 or any(k in _GPU_SBATCH for k, _ in spec.job.sbatch)


@dataclass(frozen=True)
class ContainerRuntime:
    """Base: the bare runtime's behaviour. Subclasses override what they need."""

    kind: ClassVar[str] = ""
    keys: ClassVar[Tuple[str, ...]] = ("kind",)  # the runtime mapping's keys it takes
    bind_rule: ClassVar[Optional[BindRule]] = None  # None: this runtime binds nothing
    # The task script (bash -c "$task_env" ...) runs inside the container, with the image's
    # tools, instead of on the host before the container starts.
    task_script_inside: ClassVar[bool] = False
    # Why mpirun cannot start this runtime's tasks ("" when it can).
    mpirun_problem: ClassVar[str] = ""
    # Why submitit cannot start this runtime's tasks ("" when it can).
    submitit_problem: ClassVar[str] = ""

    spec: JobSpec
    # Argv every task of the launch starts through, inside the container (the plan's: the
    # stack hook's prelude in a jobscript's launch; never in the doctor's checks, which enter
    # the container without it, nor in submitit's tasks).
    prelude: Tuple[Token, ...] = ()
    # Names the job exports for the tasks, whose value must win over the image's.
    exports: Tuple[str, ...] = ()
    # Names (or NAME* prefixes) that need only reach the tasks.
    forwards: Tuple[str, ...] = ()

    @property
    def config(self) -> Runtime:
        return self.spec.runtime

    @classmethod
    def image_problem(cls, image: str) -> Optional[str]:
        """Why this runtime cannot run ``image`` (by its form), or None."""
        return None

    def batch_lines(self) -> List[Statement]:
        """Batch-scope statements this runtime needs (job-global values only)."""
        return []

    def setup_argv(self) -> List[Token]:
        """Argv run once per node before the launch, or [] for none."""
        return []

    def setup_step(self) -> Tuple[Token, ...]:
        """The once-per-node set-up as a whole command (node_srun + setup_argv), () for none."""
        inner = self.setup_argv()
        return tuple(node_srun() + inner) if inner else ()

    def cwd_guard(self) -> List[Statement]:
        """Fail loudly when the kit's directory or the submit directory cannot be written as
        this runtime's bind."""
        if self.bind_rule is None:
            return []
        paths: List[Token] = [Var("kit")] + ([PWD] if self.config.bind_cwd else [])
        return [Raw(join(["jsc_bindable", self.kind, self.bind_rule.glob(),
                          self.bind_rule.what(), *paths]))]

    def image_guard(self, image: Optional[str]) -> List[Statement]:
        """Stop the job on its first node where the image file is for another CPU
        architecture than the node's (launcher/node/image_arch.py): one line naming both."""
        if image is None:
            return []
        return [Raw(join(["jsc_image_arch", expansion(image)]) + " || exit 1")]

    def srun_flags(self) -> List[Token]:
        """Extra flags for every srun that starts tasks of the program."""
        return []

    def wrap(self, argv: Sequence[Token], task_env: Sequence[str] = ()) -> List[Token]:
        """The argv that runs ``argv`` as a task inside this runtime; task_env names must
        reach it. ``argv`` runs through the plan's ``prelude``, itself run inside (after the
        runtime has set the image's environment): the stack hook's goes first on the
        PYTHONPATH that ``argv`` would have had, which is kept after it."""
        return self.enter([*self.prelude, *argv], task_env)

    def enter(self, argv: Sequence[Token], task_env: Sequence[str] = ()) -> List[Token]:
        """The argv that runs ``argv`` inside this runtime's container as it is (what each
        runtime overrides; the doctor's checks use it directly)."""
        return list(argv)

    def local_exec(self, image: str, argv: Sequence[str]) -> Optional[List[str]]:
        """The argv that runs ``argv`` in ``image`` on this machine (the login node), for a
        check before submitting; None where that cannot be done here."""
        return None

    @property
    def inherits_env(self) -> bool:
        """True when the task's environment reaches the program without help."""
        return True


def gpu_lines(spec: JobSpec) -> List[Statement]:
    """Enroot's nvidia hook gives an image without NVIDIA_DRIVER_CAPABILITIES only `utility`:
    no libcuda, torch sees no GPU and a job that falls back to CPU says nothing. Ask for
    compute unless the site or the user chose (env.set, site.env or the submit environment)."""
    if not gpus_requested(spec):
        return []
    return [Raw(f"jsc_defaults {DRIVER_CAPS}=compute,utility  # else Enroot's nvidia hook: "
                "`utility` only, no libcuda")]


def cache_lines() -> List[Statement]:
    """The caches' variables, each only where unset (docs/guide/runtimes.md: Caches)."""
    return [Raw("jsc_cache_env  # caches: node-local, per user, unless set (the image's root is "
                "read-only)")]


def local_squashfs(image: Optional[str]) -> Optional[str]:
    return image if image and image.endswith(SQUASHFS) else None


def stamped_name(name: Optional[str], image: Optional[str]) -> List[Statement]:
    """enroot_name=NAME-SIZE-MTIME: a rebuilt image gets a fresh container, an unchanged one
    is reused by later jobs (both pyxis and Enroot keep named containers across jobs)."""
    assert image is not None  # the spec loader requires it
    return [Raw(join(["jsc_enroot_name", name or stem(image), expansion(image)]))]


def bind_parts(bind: Bind, ro_flag: str) -> List[Union[str, Var]]:
    parts = [*expansion_parts(bind.source), ":", *expansion_parts(bind.target)]
    return parts + [f":{ro_flag}"] if bind.read_only else parts


def bind_text(bind: Bind, ro_flag: str) -> Token:
    return literal_or_word(*bind_parts(bind, ro_flag))


def stem(image: str) -> str:
    name = image.rstrip("/").rsplit("/", 1)[-1].rsplit("#", 1)[-1]
    for ext in (".sqsh", ".sif", ".squashfs"):
        if name.endswith(ext):
            name = name[: -len(ext)]
    clean = "".join(c if c.isalnum() or c in "_.-" else "_" for c in name)
    return clean or "container"
