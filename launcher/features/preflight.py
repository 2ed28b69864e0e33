"""Feature preflight: ``launch.preflight``, the doctor's checks as the step before the
launch, and the doctor's own job (`jsc-compose doctor`: the same step, its reports to the CLI).

Where it sits: spec (:meth:`PreflightFeature.load_launch`) -> **preflight** -> the job plan's
steps, after the runtime's per-node set-up and before the launch -> text. ``true`` runs every
check; a mapping sets ``fake_gpus`` (the lab's fake GRES: the GPU check counts
CUDA_VISIBLE_DEVICES only and says so). ``false`` or absent: no step. The checks are the
kit's node-side code (launcher/node/doctor, run as ``python3 -I "$kit/node/run.py" doctor
...``); launcher.submit.doctor runs the doctor's job and reads its reports.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any, List, Literal, Mapping, Optional

from launcher import kit
from launcher.features.base import Context, Feature
from launcher.model import Job, JobSpec, Launch, Preflight
from launcher.modes import LaunchMode
from launcher.modes.common import KIT_PROGRAMS
from launcher.runtimes import ContainerRuntime, node_srun
from launcher.shell import Assign, Statement, Token, Var, join, render_statement
from launcher.task.torchrun_jsc.decide import MIN_TORCH_TEXT
from launcher.yamlread import Key, Reader, key_names

KEYS = (
    Key(('launch.preflight',),
        '`false`; `true` or `{fake_gpus: BOOL}`',
        "run the doctor's checks on every node as the step before the launch, and stop the job "
        'there with the table in its log when one fails ([doctor](../guide/doctor.md)); '
        '`fake_gpus`: GPUs are fake GRES (the local cluster), count `CUDA_VISIBLE_DEVICES` only'),
    Key(('launch.preflight.fake_gpus',),
        'false',
        "the GPUs are fake GRES (the project's lab): count `CUDA_VISIBLE_DEVICES` only"),
)


def load_preflight(r: Reader, value: Any) -> Optional[Preflight]:
    if value is None or value is False:
        return None
    if value is True:
        return Preflight()
    if not isinstance(value, dict):
        raise r.fail("launch.preflight", "must be true, false or a mapping {fake_gpus: BOOL}",
                     value)
    m = r.mapping("launch.preflight", value, key_names(KEYS, "launch.preflight"))
    return Preflight(fake_gpus=r.boolean("launch.preflight.fake_gpus",
                                         m.get("fake_gpus", False)))


Output = Literal["table", "json"]


def node_config(spec: JobSpec, fake_gpus: bool = False) -> dict:
    """What the node side checks, from the spec (JSON for the script)."""
    rt, launch = spec.runtime, spec.launch
    # launch.command is empty for a mode without a per-node launcher (srun, horovod).
    launcher = launch.command[0] if launch.command else None
    # The kit's own programs (torchrun_jsc, the Ray agent) come from the kit, not the image:
    # inside, only their Python and torch are looked for.
    kit_program = launcher in KIT_PROGRAMS
    return {
        "runtime": rt.kind, "image": rt.image, "binds": [b.source for b in rt.binds],
        "gpus": spec.job.gpus_per_node, "fake_gpus": fake_gpus,
        "launcher": None if kit_program else launcher, "program": spec.program[0],
        "min_torch": MIN_TORCH_TEXT if launcher and "torchrun" in launcher.rsplit("/", 1)[-1]
        else None,
        "timeout": 5.0, "start_timeout": 10.0, "deadline": 12.0, "max_skew": 2.0,
        # space: the data path as the Enroot set-up asks it (one rule, launcher/node/enroot-lib.sh)
        "enroot_data": rt.kind == "enroot",
    }


def doctor_lines(spec: JobSpec, runtime: ContainerRuntime, output: Output,
                 fake_gpus: bool = False) -> List[str]:
    """The step: one srun task per node runs the checks, the batch shell prints the verdict
    (launcher/node/job.sh ``jsc_doctor``, which hands the reports to ``doctor OUTPUT``).

    ``table`` (launch.preflight) stops the job on a cross; ``json`` hands the reports to the
    CLI (`python -m launcher doctor`), which renders them."""
    conf = json.dumps(node_config(spec, fake_gpus), sort_keys=True)
    where: List[Token] = [Var("doctor_conf"), Var("rdzv_host"), Var("rdzv_port")]
    # No --kill-on-bad-exit: a node whose check fails still lets every other node report.
    # runtime.enter: the container without the stack hook's prelude (the checks are no rank).
    step: List[Token] = [*node_srun(kill_on_bad_exit=False),
                         *kit.node_python("doctor", "node", *where), "--", *runtime.enter([])]
    stmts: List[Statement] = [Assign("doctor_conf", conf)]
    head = ["# Preflight (launch.preflight): `jsc-compose doctor`'s checks on every node before "
            "the launch."] if output == "table" else \
        ["# Doctor (`python -m launcher doctor`): the checks on every node, the reports to the "
         "CLI."]
    stop = ('{ echo "preflight: a check failed (table above); not launching" >&2; exit 1; }'
            if output == "table" else "exit 1")
    return head + [render_statement(s) for s in stmts] + [
        join(["jsc_doctor", output, *step]) + " \\\n    || " + stop, ""]


class PreflightFeature(Feature):
    name = "preflight"
    keys = KEYS

    def load_launch(self, r: Reader, m: Mapping[str, Any], job: Job, launch: Launch,
                    mode: LaunchMode) -> Launch:
        return replace(launch, preflight=load_preflight(r, m.get("preflight")))

    def steps(self, ctx: Context) -> List[str]:
        """The checks' step: the doctor's job ends with it (JSON for the CLI); a job with
        launch.preflight runs it before the launch (a table, and a cross stops the job)."""
        preflight = ctx.spec.launch.preflight
        if ctx.purpose == "doctor" or (preflight and ctx.purpose == "submit"):
            fake = bool(preflight and preflight.fake_gpus)
            return doctor_lines(ctx.spec, ctx.runtime,
                                "json" if ctx.purpose == "doctor" else "table", fake)
        return []


PREFLIGHT = PreflightFeature()

__all__ = ["PREFLIGHT", "doctor_lines", "load_preflight", "node_config"]
