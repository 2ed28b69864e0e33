"""submitit from Python with a job spec: ``executor_for(spec_path, folder)``.

Where it sits: spec (launcher.spec, the one parser) -> the job plan (purpose ``submitit``)
-> **this module** -> a submitit SlurmExecutor. The submitted function runs as ``job.nodes`` x ``launch.procs_per_node``
Slurm tasks, inside the spec's container, with what ``init_process_group("env://")`` needs:
RANK, LOCAL_RANK, WORLD_SIZE, NODE_RANK from Slurm's per-task variables, MASTER_ADDR = the
first node's inter-node name (its hostname + the site's suffix, features.site; submitit's own
TorchDistributedEnvironment takes the plain hostname, which JSC-like networks do not route),
MASTER_PORT, and GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME by the one rule of launcher/node/net. Those
are set by the job plan's own paragraphs (launcher.plan, purpose ``submitit``: the kit, site,
env, geometry and runtime paragraphs of every jobscript) and the srun mode's task script
(launcher/node/task.sh srun), in each task, before Python starts:
submitit's ``python`` command becomes
``bash "$kit/node/task.sh" srun [apptainer exec ... IMAGE] python3``.
Containers: Apptainer (the folder bound at its own path) and Enroot (the runtime's per-node
set-up step, the jobscript's, as an srun before submitit's; submitit's variables forwarded
by name); a runtime with a ``submitit_problem`` (pyxis) is refused.

``submitit_plan`` is pure (it walks the job plan: its #SBATCH options become submitit's
parameters, its paragraphs and set-up step submitit's set-up lines); ``executor_for`` only adds the
import of submitit and the executor object. Do not call submitit's
TorchDistributedEnvironment().export() in the function: the variables are set already
(it refuses to run when MASTER_ADDR is set).
"""

from __future__ import annotations

import dataclasses
import math
import os
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from launcher import kit
from launcher.model import Bind, JobSpec, SpecError
from launcher.modes.common import gpu_layout
from launcher.plan import build_plan, setup_lines
from launcher.runtimes import RUNTIMES, runtime_for
from launcher.shell import Raw, Statement, join, render_statement
from launcher.slurm import time_seconds
from launcher.spec import load_spec

# The plan's #SBATCH options that become submitit's parameters, by name (typed as submitit
# takes them); job.sbatch's go to additional_parameters, the logs are submitit's own.
_PARAMETERS = {"job-name": ("job_name", str), "nodes": ("nodes", int),
               "ntasks-per-node": ("ntasks_per_node", int), "partition": ("partition", str),
               "account": ("account", str), "cpus-per-task": ("cpus_per_task", int),
               "gpus-per-node": ("gpus_per_node", int), "exclusive": ("exclusive", bool)}
_SUBMITIT_LOGS = ("output", "error")  # submitit names its own log files
# submitit's own variables (SUBMITIT_EXECUTOR, ...) must reach Python inside Enroot, which
# forwards variables by name only.
_SUBMITIT_NAMES = ("SUBMITIT_*",)


@dataclass(frozen=True)
class SubmititPlan:
    """What executor_for hands to submitit: the python command and update_parameters()."""

    python: str
    parameters: Dict[str, Any]
    setup: Tuple[str, ...]


def minutes(time: str) -> int:
    """A Slurm time (M, M:S, H:M:S, D-H, D-H:M, D-H:M:S; validated by launcher.spec) in
    whole minutes, rounded up: submitit takes its time limit in minutes."""
    return max(1, math.ceil(time_seconds(time) / 60))


def _bind_root(folder: str) -> str:
    """The directory to bind for a submitit folder: the folder itself, or, when it holds a
    %-pattern (%j, ...) that submitit fills per job, the directory above that part."""
    if "%" not in folder:
        return folder.rstrip("/") or "/"
    head = folder.split("%", 1)[0]
    return head.rstrip("/") if head.endswith("/") else (os.path.dirname(head) or "/")


def submitit_plan(spec: JobSpec, folder: str, python: Optional[str] = None,
                  kit_dir: Optional[str] = None) -> SubmititPlan:
    """The executor's python command, parameters and sbatch set-up lines for ``spec``.

    ``folder``: the absolute submitit folder (bound into the container at the same path).
    ``python``: the bare runtime's interpreter (default: this one, as submitit does; python3
    from the venv when site.venv is set). ``kit_dir``: the kit's package directory the job
    runs the node-side code from (default: this kit's, launcher.kit.installed)."""
    job, kind = spec.job, spec.runtime.kind
    unsupported = RUNTIMES[kind].submitit_problem
    if unsupported:
        raise SpecError(spec.source, "runtime.kind", f"submitit cannot use {kind}: "
                        f"{unsupported}", kind)
    if job.requeue is not None:
        raise SpecError(spec.source, "job.requeue", "submitit requeues by itself (on its "
                        "own USR2 signal; submitit.helpers.Checkpointable); remove job.requeue")
    if not folder.startswith("/"):
        raise ValueError(f"submitit folder must be an absolute path, got {folder!r}")
    rule = RUNTIMES[kind].bind_rule
    if rule is not None:  # the submitit folder must be bound at its path
        root = _bind_root(folder)
        bad = rule.found(root)
        if bad:
            raise ValueError(f"{kind} cannot bind the submitit folder {root!r} (it contains "
                             f"{' or '.join(bad)}): choose a folder without them")
        literal = root.replace("$", "$$")  # bind paths expand $NAME; this one is literal
        binds = spec.runtime.binds + (Bind(literal, literal),)
        env = dataclasses.replace(spec.env, passthrough=spec.env.passthrough + _SUBMITIT_NAMES)
        spec = dataclasses.replace(
            spec, env=env, runtime=dataclasses.replace(spec.runtime, binds=binds))
    plan = build_plan(spec, "submitit", kit_dir)
    interpreter = None if kind == "bare" and not spec.site.venv else ["python3"]
    if python is not None and interpreter:
        where = f"site.venv {spec.site.venv}" if kind == "bare" else f"the {kind} image"
        raise ValueError(f"python= is for the bare runtime without site.venv; this spec runs "
                         f"python3 from {where}")
    inner = join(plan.runtime.wrap(interpreter), width=10**9) if interpreter else \
        (python or shlex.quote(sys.executable))
    command = f"{join(kit.task_script('srun'), width=10**9)} {inner}"

    statements: List[Statement] = [s for p in plan.paragraphs for s in p.lines]
    step = setup_lines(plan)
    # submitit's set-up lines run without set -e: a failed set-up ends the job here.
    statements += [Raw(step[0]), Raw(step[1] + " || exit 1")] if step else []
    setup = tuple(render_statement(s) for s in statements)

    params: Dict[str, Any] = {"setup": list(setup)}
    extra: Dict[str, Any] = {}
    for o in plan.sbatch:
        if o.owner == "job.sbatch":
            extra[o.option] = True if o.value is None else o.value
        elif o.option in _PARAMETERS:
            name, kind_of = _PARAMETERS[o.option]
            params[name] = True if kind_of is bool else kind_of(o.value)
        elif o.option == "time":
            params["time"] = minutes(str(o.value))
        elif o.option not in _SUBMITIT_LOGS:
            raise AssertionError(f"submitit: no parameter for #SBATCH --{o.option}")
    layout = gpu_layout(spec, spec.launch.procs_per_node)  # srun mode's socket-by-socket
    if layout:
        params["srun_args"] = layout
    if extra:
        params["additional_parameters"] = extra
    return SubmititPlan(python=command, parameters=params, setup=setup)


# What submitit's worker needs in the image: submitit itself (the same version as the
# submitting Python: the job's pickles are its own) and cloudpickle. -I: the user's directory
# off sys.path, as on the nodes.
_WORKER_PROBE = ("python3", "-I", "-c",
                 "import cloudpickle, submitit; print('SUBMITIT', submitit.__version__)")


def _submitit_version() -> Optional[str]:
    try:
        from importlib.metadata import version
        return version("submitit")
    except Exception:  # not installed: executor_for says so itself
        return None


def worker_problem(spec: JobSpec, local_version: Optional[str],
                   run: Any = subprocess.run) -> Optional[str]:
    """Why submitit's worker cannot run in the spec's image (one line), or None: the image
    is asked on this machine where its runtime can run it here (Apptainer, a local file),
    else nothing is checked (Enroot squashfs, registry references, bare)."""
    image = spec.runtime.image
    if not image or not os.path.exists(os.path.expanduser(image)):
        return None
    argv = runtime_for(spec).local_exec(os.path.expanduser(image), _WORKER_PROBE)
    if argv is None:
        return None
    try:
        done = run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                   universal_newlines=True, timeout=120, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"cannot ask the image whether it has submitit ({argv[0]}: {exc})"
    found = [ln.split()[1] for ln in done.stdout.splitlines()
             if ln.startswith("SUBMITIT ") and len(ln.split()) == 2]
    if done.returncode != 0 or not found:
        why = (done.stderr.strip().splitlines() or ["no answer"])[-1]
        return (f"submitit's worker cannot run in this image ({why}); it needs submitit and "
                "cloudpickle: make launchers-image builds launchers.sif with the pinned ones")
    if local_version and found[0] != local_version:
        return (f"the image has submitit {found[0]}, this Python {local_version}: the worker "
                "must read this Python's pickles; use the same version "
                "(requirements/launchers.txt)")
    return None


def executor_for(spec_path: str, folder: str, python: Optional[str] = None,
                 check_image: bool = True) -> Any:
    """A submitit SlurmExecutor that runs submitted functions as the spec says.

    ``job = executor_for("jobs/sum_submitit.yaml", "build/submitit/%j").submit(fn)``;
    ``job.results()`` then holds one result per task (rank order). Raises SpecError for a
    spec it cannot run (one line), an image whose submitit is missing or another version
    than this Python's (asked on this machine where the runtime can run the image here;
    ``check_image=False`` skips it), ImportError when submitit is missing."""
    spec = load_spec(spec_path)
    absolute = str(Path(folder).expanduser().absolute())
    plan = submitit_plan(spec, absolute, python)
    try:
        from submitit import SlurmExecutor
    except ImportError:
        raise ImportError("submitit is not installed in this Python: pip install the pinned "
                          "version from requirements/launchers.txt (scripts/setup.sh does)") \
            from None
    if check_image:
        problem = worker_problem(spec, _submitit_version())
        if problem:
            raise SpecError(spec.source, "runtime.image", problem, spec.runtime.image)
    executor = SlurmExecutor(folder=absolute, python=plan.python)
    executor.update_parameters(**plan.parameters)
    return executor


__all__ = ["SubmititPlan", "executor_for", "minutes", "submitit_plan", "worker_problem"]
