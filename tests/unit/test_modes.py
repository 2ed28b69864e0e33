"""Ring 1: the launch-mode units (launcher/modes/): the registry, a plan of several steps
(background steps, a script step, the foreground step, a teardown trap) rendered in order,
and the key rules each mode declares."""

from __future__ import annotations

import subprocess

import pytest

from launcher import modes as modes_pkg
from launcher.jobscript import render_jobscript
from launcher.model import JobSpec, SpecError
from launcher.modes import MODES, LaunchMode, Plan, Step, plan_launch
from launcher.modes.common import srun_argv
from launcher.preview import render_preview
from launcher.runtimes import ContainerRuntime
from launcher.spec import parse_spec


class TwoPhase(LaunchMode):
    """A Ray-like mode: a head and workers in the background, a wait, the driver, teardown."""

    name = "two_phase"

    def plan(self, spec: JobSpec, rt: ContainerRuntime) -> Plan:
        head = Step("head on the first node", tuple(srun_argv(spec, rt, 1)), ("head", "x y"),
                    background=True, pid_var="head_pid")
        wait = Step("wait until every node joined", script='echo "waiting"')
        driver = Step(self.comment(spec), (), tuple(rt.wrap(spec.program)))
        return Plan(self.name, 1, True, False, False, (), (head, wait, driver), False,
                    teardown='    kill "$head_pid" 2>/dev/null || true')

    def comment(self, spec: JobSpec) -> str:
        return "the driver, once"


@pytest.fixture
def two_phase(monkeypatch):
    monkeypatch.setitem(MODES, "two_phase", TwoPhase())
    monkeypatch.setattr(modes_pkg, "MODE_NAMES", tuple(MODES))
    monkeypatch.setattr("launcher.spec.MODE_NAMES", tuple(MODES))


def test_plan_of_several_steps_renders_in_order(two_phase):
    spec = parse_spec("job: {nodes: 2}\nlaunch: {mode: two_phase}\nprogram: [drv, 'a b']", "x.yaml")
    text = render_jobscript(spec)
    tail = text[text.index("# Teardown"):]
    assert tail.startswith("# Teardown on every exit: success, failure and cancel.\n"
                           "teardown() {\n    kill \"$head_pid\" 2>/dev/null || true\n}\n"
                           "trap teardown EXIT\n\n# head on the first node.\nsrun ")
    assert "head 'x y' &\nhead_pid=$!\n\n# wait until every node joined.\necho \"waiting\"\n\n" \
        "# Launch: the driver, once.\ndrv 'a b' &\nlaunch_pid=$!\n" in tail
    # In the background and waited for (the hang traps run meanwhile), its status the job's.
    assert tail.endswith('if [ "$launch_rc" -ne 0 ]; then exit "$launch_rc"; fi\n')
    subprocess.run(["bash", "-n"], input=text, text=True, check=True)
    assert "# in the background (head on the first node): srun" in \
        render_preview(spec, "jwb[0001-0002]")
    assert plan_launch(spec)[1].launch == ("drv", "a b")


def test_a_plan_has_one_foreground_step():
    fg = Step("a", ("x",))
    with pytest.raises(ValueError):
        Plan("m", 1, False, False, False, (), (fg, fg), False)
    with pytest.raises(ValueError):
        Step("bg", ("x",), background=True)  # no pid variable
    with pytest.raises(ValueError):
        Step("neither")


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
