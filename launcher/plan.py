"""The job as one value: :func:`build_plan` turns a validated spec and a purpose into a
:class:`JobPlan`, the dry run that everything after the loader walks.

Where it sits: spec (load) -> **plan** -> text (launcher.render.jobscript renders a plan; the
preview, the doctor and submitit walk one) -> submit. Pure: no environment, no subprocess, no
clock. ``jsc-compose render --json SPEC`` prints it (:func:`plan_json`).

A plan holds, in the order of the script: the ``#SBATCH`` options (each with the part of the
kit that asked for it), the batch-scope paragraphs, the runtime's once-per-node set-up step,
the steps before the launch (the preflight), and the launch itself. This module is the only
place that writes that order, asking the features (launcher/features/, in the order of
``FEATURES``), the mode and the runtime for their pieces, and the one place where features
meet: :func:`settle_signal` keeps one ``--signal``, and the line after the launch is the
first feature's verdict, else the launch's own exit status.

Purposes: ``submit`` (what `render` prints and `submit` sends), ``doctor`` (the same set-up,
then the doctor's checks instead of the launch), ``preview`` (what each node would run; its
tasks start without the stack hook's prelude) and ``submitit`` (the set-up lines of a
submitit executor: no log, hangs or requeue paragraph, and submitit's srun is the launch).
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, replace
from typing import Any, Dict, List, Optional, Tuple, Union

from launcher import __version__, kit
from launcher.features import FEATURES, PURPOSES, Context
from launcher.features.spare import allocated_nodes
from launcher.model import JobSpec
from launcher.modes import LaunchMode, Plan, Step, mode_for, plan_launch
from launcher.runtimes import ContainerRuntime, runtime_for
from launcher.shell import Raw, Statement, Token, Var, join, quote, render_statement, word

# env:// for the tasks (MASTER_ADDR/MASTER_PORT), from the rendezvous (features.site).
MASTER_ENV = Raw('export MASTER_ADDR="$rdzv_host" MASTER_PORT="$rdzv_port"')
# Who wins where several parts ask for --signal (sbatch keeps one): the job's own
# (job.sbatch), then requeue's (its protocol needs its signal), then hangs' early stacks.
SIGNAL_PRECEDENCE = ("job.sbatch", "requeue", "hangs")


@dataclass(frozen=True)
class SbatchLine:
    """One ``#SBATCH --option[=value]``, and the part of the kit that asked for it."""

    option: str
    value: Optional[str]  # None: a bare flag
    owner: str  # "job" (the spec's job section), "job.sbatch", or a feature's name


@dataclass(frozen=True)
class Paragraph:
    """Batch-scope statements, written together (a blank line after): ``name`` says whose."""

    name: str
    lines: Tuple[Statement, ...]


@dataclass(frozen=True)
class JobPlan:
    """A job, before it is text (see the module's docstring)."""

    purpose: str
    spec: JobSpec
    version: str
    kit_dir: str  # the kit's package directory the nodes run its code from
    mode: LaunchMode
    runtime: ContainerRuntime  # with the prelude and the names the features hand it
    launch: Plan  # the mode's launch plan (for submitit: its geometry only)
    sbatch: Tuple[SbatchLine, ...]  # sorted
    paragraphs: Tuple[Paragraph, ...]
    setup: Tuple[Token, ...]  # the runtime's once-per-node set-up (THE per-node srun), () none
    steps: Tuple[str, ...]  # text lines before the launch (the preflight / doctor step)
    launch_lines: Tuple[str, ...]  # the launch and the verdict; () where the kit launches nothing


def settle_signal(options: List[SbatchLine]) -> List[SbatchLine]:
    """One ``--signal`` where several parts ask for one, by SIGNAL_PRECEDENCE."""
    signals = [o for o in options if o.option == "signal"]
    if len(signals) < 2:
        return options
    keep = min(signals, key=lambda o: SIGNAL_PRECEDENCE.index(o.owner))
    return [o for o in options if o.option != "signal" or o is keep]


def _job_options(spec: JobSpec, launch: Plan) -> List[SbatchLine]:
    job = spec.job
    given: Dict[str, Optional[str]] = {
        "job-name": job.name, "nodes": str(allocated_nodes(job)),
        "ntasks-per-node": str(launch.tasks_per_node), "output": job.output,
        "time": job.time, "partition": job.partition, "account": job.account,
        "error": job.error,
        "cpus-per-task": None if job.cpus_per_task is None else str(job.cpus_per_task),
        "gpus-per-node": str(job.gpus_per_node) if job.gpus_per_node else None}
    required = ("job-name", "nodes", "ntasks-per-node", "output")
    out = [SbatchLine(k, v, "job") for k, v in given.items() if v is not None or k in required]
    return out + [SbatchLine(k, v, "job.sbatch") for k, v in job.sbatch]


def _submitit_launch(spec: JobSpec) -> Plan:
    """submitit's geometry: procs_per_node tasks per node started by its own srun, each with
    MASTER_ADDR/MASTER_PORT (its python command runs the srun mode's task script)."""
    return Plan(tasks_per_node=spec.launch.procs_per_node,
                step=Step("submitit's srun", (), ()), master_env=True)


def _log_lines(spec: JobSpec, launch: Plan) -> List[Statement]:
    """The job's first line in its log (launcher/node/job.sh ``jsc_job_line``), and the
    per-node logs' names (job.node_output) where srun writes them."""
    out: List[Statement] = [Raw("jsc_job_line")]
    if launch.node_logs and spec.job.node_output is not None:
        folder = posixpath.dirname(spec.job.node_output)
        if folder:
            out.append(Raw(join(["mkdir", "-p", "--", folder])))
        out += _node_logs_line(spec.job.node_output)
    return out


def _node_logs_line(pattern: str) -> List[Statement]:
    """echo the per-node log names with %x and %j filled in from the job's own values;
    %n becomes N, with the range of node indices."""
    parts: List[Union[str, Var]] = []
    for literal, code in re.findall(r"([^%]*)(%%|%[0-9]*[A-Za-z]|%|)", pattern):
        parts.append(literal)
        parts.append({"%x": Var("SLURM_JOB_NAME"), "%j": Var("SLURM_JOB_ID"), "%%": "%",
                      "%n": "N"}.get(code, code))
    if "%n" not in pattern:
        return [Raw(join(["echo", "per-node logs:", word(*parts)]))]
    return [Raw(join(["echo", "per-node logs:", word(*parts)]) +
                ' \\\n    "(N = node index 0..$((nnodes - 1)))"')]


def build_plan(spec: JobSpec, purpose: str = "submit", kit_dir: Optional[str] = None,
               version: str = __version__) -> JobPlan:
    """The plan of ``spec`` for ``purpose`` (one of PURPOSES). ``kit_dir``: the kit's package
    directory the nodes run its code from (launcher.kit.for_render), relative to the submit
    directory or absolute; by default this kit's, absolute."""
    if purpose not in PURPOSES:
        raise ValueError(f"purpose must be one of {', '.join(PURPOSES)}, got {purpose!r}")
    mode = mode_for(spec.launch.mode)
    runtime = runtime_for(
        spec, prelude=[t for f in FEATURES for t in f.prelude(spec, purpose)],
        exports=[n for f in FEATURES for n in f.exports(spec, purpose)] + [kit.LOG_ENV],
        forwards=[n for f in FEATURES for n in f.forwards(spec, purpose)])
    launch = _submitit_launch(spec) if purpose == "submitit" else plan_launch(spec, runtime)[1]
    ctx = Context(spec=spec, purpose=purpose, runtime=runtime, mode=mode, launch=launch)
    for f in FEATURES:  # the launch as the features run it (spare: one step per node)
        launch = replace(launch, step=f.launch_step(ctx, launch.step))
        ctx = replace(ctx, launch=launch)

    options = _job_options(spec, launch) + [
        SbatchLine(k, v, f.name) for f in FEATURES for k, v in f.sbatch(ctx)]
    sbatch = tuple(sorted(settle_signal(options), key=lambda o: (o.option, o.value)))

    kit_dir = kit_dir or str(kit.installed())
    geometry: List[Statement] = [s for f in FEATURES for s in f.geometry(ctx)]
    geometry += ([MASTER_ENV] if launch.master_env else []) + list(launch.batch)
    paragraphs = [Paragraph("kit", tuple(kit.lines(kit_dir, version)))]
    paragraphs += [Paragraph(f.name, tuple(f.environment(ctx))) for f in FEATURES]
    paragraphs += [Paragraph("geometry", tuple(geometry)),
                   Paragraph("runtime", tuple(runtime.batch_lines()))]
    if purpose != "submitit":
        paragraphs.append(Paragraph("log", tuple(_log_lines(spec, launch))))
    paragraphs += [Paragraph(f.name, tuple(f.setup(ctx))) for f in FEATURES]

    launch_lines: List[str] = []
    if purpose == "submit":
        verdicts = [v for v in (f.verdict(ctx) for f in FEATURES) if v is not None]
        # In the background and waited for (launcher/node/job.sh jsc_wait_launch), so that
        # the traps run while it runs; its exit status is the job's unless a verdict follows.
        launch_lines = [f"# Launch: {launch.step.comment}.",
                        *(line for f in FEATURES for line in f.before_launch(ctx)),
                        join(launch.step.argv) + " &", "jsc_wait_launch",
                        verdicts[0] if verdicts else 'exit "$launch_rc"']
    return JobPlan(purpose=purpose, spec=spec, version=version, kit_dir=kit_dir, mode=mode,
                   runtime=runtime, launch=launch, sbatch=sbatch,
                   paragraphs=tuple(p for p in paragraphs if p.lines),
                   setup=runtime.setup_step(),
                   steps=tuple(line for f in FEATURES for line in f.steps(ctx)),
                   launch_lines=tuple(launch_lines))


def spec_warnings(spec: JobSpec) -> List[str]:
    """What the features say a valid spec will likely not do as meant: one line each (the
    CLI prints them on stderr for every command; the job goes on)."""
    mode = mode_for(spec.launch.mode)
    return [line for f in FEATURES for line in f.warnings(spec, mode)]


def setup_lines(plan: JobPlan) -> List[str]:
    """The runtime's once-per-node set-up step (THE per-node srun) with its comment, or none."""
    if not plan.setup:
        return []
    return [f"# Once per node: {plan.runtime.kind} setup.", join(plan.setup)]


def plan_json(plan: JobPlan) -> Dict[str, Any]:
    """The plan as JSON-ready data (`jsc-compose render --json`): shell words as the script
    writes them, each statement as its text."""
    def words(argv: Tuple[Token, ...]) -> List[str]:
        return [quote(t) for t in argv]

    return {
        "spec": plan.spec.source, "purpose": plan.purpose, "version": plan.version,
        "kit": plan.kit_dir, "mode": plan.mode.name, "runtime": plan.runtime.kind,
        "sbatch": [{"option": o.option, "value": o.value, "from": o.owner}
                   for o in plan.sbatch],
        "paragraphs": [{"name": p.name, "lines": [render_statement(s) for s in p.lines]}
                       for p in plan.paragraphs],
        "tasks": {"prelude": words(plan.runtime.prelude),
                  "exports": sorted(set(plan.runtime.exports)),
                  "forwards": sorted(set(plan.runtime.forwards))},
        "setup": words(plan.setup),
        "steps": list(plan.steps),
        "launch": {"comment": plan.launch.step.comment,
                   "tasks_per_node": plan.launch.tasks_per_node,
                   "starter": words(plan.launch.step.starter),
                   "task": words(plan.launch.step.task),
                   "lines": list(plan.launch_lines)},
    }


__all__ = ["MASTER_ENV", "SIGNAL_PRECEDENCE", "JobPlan", "Paragraph", "SbatchLine",
           "build_plan", "plan_json", "settle_signal", "setup_lines", "spec_warnings"]
