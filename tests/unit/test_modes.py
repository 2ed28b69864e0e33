"""Ring 1: the launch-mode units (launcher/modes/): the registry, a mode defined outside the
package rendered and previewed, mode checks run by the spec loader, the keyword-only plan,
and the key rules each mode declares."""

from __future__ import annotations

import subprocess

import pytest

from launcher import modes as modes_pkg
from launcher.render.jobscript import render_jobscript
from launcher.model import JobSpec, SpecError
from launcher.modes import MODES, LaunchMode, Plan, Step, plan_launch
from launcher.modes.common import srun_argv
from launcher.render.preview import render_preview
from launcher.runtimes import ContainerRuntime
from launcher.spec import parse_spec


class Driver(LaunchMode):
    """A mode written outside the package: one task per node runs the program."""

    name = "driver"

    def check(self, spec: JobSpec) -> None:
        if spec.job.nodes > 4:
            raise SpecError(spec.source, "job.nodes", "mode driver runs on at most 4 nodes",
                            spec.job.nodes)

    def plan(self, spec: JobSpec, rt: ContainerRuntime) -> Plan:
        step = Step(self.comment(spec), tuple(srun_argv(spec, rt, 1)),
                    tuple(rt.wrap(spec.program)))
        return Plan(tasks_per_node=1, step=step)

    def comment(self, spec: JobSpec) -> str:
        return "the driver, once"


@pytest.fixture
def driver(monkeypatch):
    monkeypatch.setitem(MODES, "driver", Driver())
    monkeypatch.setattr(modes_pkg, "MODE_NAMES", tuple(MODES))
    monkeypatch.setattr("launcher.spec.MODE_NAMES", tuple(MODES))


def test_a_mode_is_one_class_and_its_plan_renders(driver):
    spec = parse_spec("job: {nodes: 2}\nlaunch: {mode: driver}\nprogram: [drv, 'a b']", "x.yaml")
    text = render_jobscript(spec)
    launch = text[text.index("# Launch: the driver, once.\n"):]
    assert launch.startswith("# Launch: the driver, once.\nsrun --kill-on-bad-exit=1 ")
    assert " drv 'a b' &\njsc_wait_launch\n" in launch
    # In the background and waited for (the hang traps run meanwhile), its status the job's.
    assert launch.endswith('jsc_wait_launch\nexit "$launch_rc"\n')
    subprocess.run(["bash", "-n"], input=text, text=True, check=True)
    assert plan_launch(spec)[1].launch[-2:] == ("drv", "a b")
    assert "node 1 jwb0002: node_rank=1 is_host=no\n  rank 1: drv 'a b'\n" in \
        render_preview(spec, "jwb[0001-0002]")


def test_a_modes_check_runs_when_the_spec_is_loaded(driver):
    with pytest.raises(SpecError) as err:
        parse_spec("job: {nodes: 5}\nlaunch: {mode: driver}\nprogram: [drv]", "x.yaml")
    assert str(err.value) == "x.yaml: job.nodes: mode driver runs on at most 4 nodes, got 5"


@pytest.mark.parametrize("text,message", [
    ("job: {nodes: 2, time: '1:00:00', requeue: true}\nlaunch: {mode: ray}",
     "x.yaml: job.requeue: mode ray: Ray (the node agents and Ray's daemons) does not survive"),
    ("job: {nodes: 2, time: '1:00:00', requeue: true}\nlaunch: {mode: deepspeed}",
     "x.yaml: job.requeue: mode deepspeed: the deepspeed launcher does not survive"),
    ("job: {nodes: 1}\nlaunch: {mode: accelerate}",
     "x.yaml: launch.procs_per_node: mode accelerate starts at least 2 processes in all"),
    ("job: {nodes: 2}\nruntime: {kind: pyxis, image: i.sqsh}\nlaunch: {mode: mpirun_torchrun}",
     "x.yaml: runtime.kind: pyxis containers start only through srun"),
    ("job: {nodes: 2}\nruntime: {kind: pyxis, image: i.sqsh}\n"
     "launch: {mode: horovod, mpi: mpirun}",
     "x.yaml: runtime.kind: pyxis containers start only through srun")])
def test_what_a_mode_cannot_run_fails_at_load_not_at_render(text, message):
    with pytest.raises(SpecError) as err:
        parse_spec(text + "\nprogram: [p]", "x.yaml")
    assert str(err.value).startswith(message)


@pytest.mark.parametrize("launch, advice, advised", [
    ("{mode: mpirun_torchrun}", "use launch.mode: torchrun", "{mode: torchrun}"),
    ("{mode: horovod, mpi: mpirun}", "use launch.mpi: srun", "{mode: horovod, mpi: srun}")])
def test_the_advice_for_mpirun_under_pyxis_is_accepted(launch, advice, advised):
    """Issue 43: mpirun_torchrun + pyxis advised launch.mpi: srun, which that mode refuses."""
    base = "job: {nodes: 2}\nruntime: {kind: pyxis, image: i.sqsh}\nprogram: [p]\nlaunch: "
    with pytest.raises(SpecError) as err:
        parse_spec(base + launch, "x.yaml")
    assert advice in str(err.value)
    parse_spec(base + advised, "x.yaml")


def test_a_plan_is_built_by_keyword():
    step = Step("a", ("srun",), ("x",))
    with pytest.raises(TypeError):
        Plan(1, step)  # type: ignore[misc]
    under_mpirun = Plan(tasks_per_node=2, step=step, via_mpirun=True)
    assert under_mpirun.srun_tasks_per_node == 1 and not under_mpirun.node_logs
    by_srun = Plan(tasks_per_node=2, step=step)
    assert by_srun.srun_tasks_per_node == 2 and by_srun.node_logs


def test_every_mode_is_one_unit():
    """Each registered mode is chosen by its name in a spec and renders a job with its own
    launch comment; the keys it claims are its own, each with what it is."""
    for name, mode in MODES.items():
        spec = parse_spec(f"job: {{nodes: 2}}\nlaunch: {{mode: {name}}}\nprogram: [p]", "x.yaml")
        assert f"\n# Launch: {mode.comment(spec)}.\n" in render_jobscript(spec), name
        for key, why in mode.keys.items():
            assert why and key not in ("mode", "procs_per_node", "rdzv_port")


def test_a_key_of_several_modes_names_them_all():
    with pytest.raises(SpecError) as err:
        parse_spec("job: {nodes: 1}\nlaunch: {mode: srun, command: x}\nprogram: [p]", "x.yaml")
    assert "modes torchrun" in str(err.value) and "mpirun_torchrun" in str(err.value)
