"""What a feature is: the class to subclass and what its hooks see (launcher/features/).

Where it sits: spec (loads through ``load_job``/``load_launch``) -> **features** -> the job
plan (launcher.plan asks every hook) -> text. Each hook's default does nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, List, Literal, Mapping, Optional, Tuple

from launcher.model import Job, JobSpec, Launch
from launcher.modes import LaunchMode, Plan, Step
from launcher.runtimes import ContainerRuntime
from launcher.shell import Statement, Token
from launcher.yamlread import Key, Reader

# Why a plan is made: the job `submit` sends (and `render` prints); the short job `doctor`
# runs (its set-up, then the checks, no launch); `preview` (what each node would run);
# `submitit` (the set-up lines of a submitit executor, whose srun is submitit's own).
Purpose = Literal["submit", "doctor", "preview", "submitit"]
PURPOSES: Tuple[str, ...] = ("submit", "doctor", "preview", "submitit")
SbatchOption = Tuple[str, Optional[str]]  # (long option, value); None: a bare flag


@dataclass(frozen=True)
class Context:
    """What a feature's hooks see: the validated spec, why the plan is made, the runtime
    object, the launch mode and its plan (for submitit: one task per process, srun's
    geometry; the launch is submitit's own)."""

    spec: JobSpec
    purpose: str
    runtime: ContainerRuntime
    mode: LaunchMode
    launch: Plan


class Feature:
    """Subclass per feature; every hook's default does nothing."""

    name: ClassVar[str] = ""
    # Whole top-level sections of the spec this feature reads (site, env).
    sections: ClassVar[Tuple[str, ...]] = ()
    # Every key it reads, declared once (launcher.yamlread.Key): its keys in the job and
    # launch mappings (job.requeue, launch.preflight) are accepted there because they are
    # declared here, and the spec reference lists these rows.
    keys: ClassVar[Tuple[Key, ...]] = ()

    # --- load: the spec loader (launcher.spec) calls these once the section is read ---

    def load_job(self, r: Reader, m: Mapping[str, Any], job: Job) -> Job:
        """``job`` with this feature's job keys read from the mapping ``m``."""
        return job

    def load_launch(self, r: Reader, m: Mapping[str, Any], job: Job, launch: Launch,
                    mode: LaunchMode) -> Launch:
        """``launch`` with this feature's launch keys read from ``m`` (the mode's own
        options are already in ``launch.options``)."""
        return launch

    def warnings(self, spec: JobSpec, mode: LaunchMode) -> List[str]:
        """A valid spec that will likely not do what was meant: one line each, for `check`
        and `submit` (stderr; the job goes on)."""
        return []

    # --- plan: launcher.plan.build_plan calls these in the order of FEATURES ---

    def exports(self, spec: JobSpec, purpose: str) -> Tuple[str, ...]:
        """Names this feature exports at batch scope whose value the tasks must get, over
        the image's own (pyxis keeps them, Enroot forwards them)."""
        return ()

    def forwards(self, spec: JobSpec, purpose: str) -> Tuple[str, ...]:
        """Names (or NAME* prefixes) that need only reach the tasks, through a runtime that
        forwards nothing by itself (Enroot)."""
        return ()

    def prelude(self, spec: JobSpec, purpose: str) -> Tuple[Token, ...]:
        """Argv every task of the launch starts through, inside the container, before its
        own (it must exec the rest)."""
        return ()

    def sbatch(self, ctx: Context) -> List[SbatchOption]:
        return []

    def environment(self, ctx: Context) -> List[Statement]:
        return []

    def geometry(self, ctx: Context) -> List[Statement]:
        return []

    def setup(self, ctx: Context) -> List[Statement]:
        return []

    def steps(self, ctx: Context) -> List[str]:
        """Steps before the launch, after the runtime's per-node set-up (text lines)."""
        return []

    def before_launch(self, ctx: Context) -> List[str]:
        return []

    def launch_step(self, ctx: Context, step: Step) -> Step:
        """The launch as this feature runs it (``step``: the mode's, or the one a feature
        before this one made of it); the default leaves it as it is."""
        return step

    def verdict(self, ctx: Context) -> Optional[str]:
        """The line after the launch was waited for, which ends the script (None: this
        feature has none; the plan takes the first feature's that has one)."""
        return None
