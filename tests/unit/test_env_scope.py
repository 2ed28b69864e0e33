"""Ring 1: what env.set may set (issue 43, item 3; launcher/features/env.py): Slurm's own
variables (SLURM_*, SLURMD_*, SRUN_*) and the shell's control variables (IFS, BASH_ENV,
SHELLOPTS, ...) refused in one line; PATH, LD_PRELOAD, LD_LIBRARY_PATH rendered for the
program only (carrier names the task prelude sets), never exported at batch scope. That they
reach the program and not the script's own srun: tests/fakes/test_env_scope.py."""

from __future__ import annotations

import pytest

from launcher.features.env import ENV, SHELL_CONTROL, TASK_ENV
from launcher.model import SpecError
from launcher.render.jobscript import render_jobscript
from launcher.spec import parse_spec

BASE = "job: {nodes: 2}\nprogram: [python3, t.py]\n"


def error(text: str) -> str:
    with pytest.raises(SpecError) as info:
        parse_spec(BASE + text, "x.yaml")
    assert "\n" not in str(info.value)
    return str(info.value)


@pytest.mark.parametrize("name", ["SLURM_JOB_NUM_NODES", "SLURM_CPUS_PER_TASK", "SLURMD_NODENAME",
                                  "SRUN_CPUS_PER_TASK"])
@pytest.mark.parametrize("key", ["set", "prepend"])
def test_slurms_variables_are_refused(name, key):
    value = "x" if key == "set" else "[x]"
    assert error(f"env: {{{key}: {{{name}: {value}}}}}\n").startswith(
        f"x.yaml: env.{key}.{name}: is Slurm's: Slurm sets it for the job")


@pytest.mark.parametrize("name", SHELL_CONTROL + ("TORCHRUN_JSC_TASK_PATH",))
def test_the_shells_control_variables_are_refused(name):
    assert f"env.set.{name}: controls how the job's own script runs" in \
        error(f"env: {{set: {{{name}: x}}}}\n")
    assert f"site.env.{name}: controls" in error(f"site: {{profile: generic, env: {{{name}: x}}}}\n")


def test_program_only_names_never_reach_batch_scope():
    spec = parse_spec(BASE + "env: {set: {PATH: /opt/bin, LD_PRELOAD: /l.so, A: b}, "
                      "prepend: {LD_LIBRARY_PATH: [/lib]}}\n", "x.yaml")
    text = render_jobscript(spec, kit_dir="/k")
    assert "export PATH=" not in text and "export LD_PRELOAD=" not in text
    assert "export TORCHRUN_JSC_TASK_PATH=/opt/bin\n" in text
    assert "export TORCHRUN_JSC_TASK_LD_PRELOAD=/l.so\n" in text
    assert f"export {TASK_ENV}='LD_PRELOAD PATH'\n" in text and "export A=b\n" in text
    assert 'export LD_LIBRARY_PATH="/lib${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"' in text
    assert ENV.exports(spec, "submit") == ("A", "LD_LIBRARY_PATH", "TORCHRUN_JSC_TASK_LD_PRELOAD",
                                           "TORCHRUN_JSC_TASK_PATH", TASK_ENV)


def test_set_and_prepend_of_a_program_only_name_is_refused():
    assert "env.set.PATH: is set for the program, which replaces its value" in \
        error("env: {set: {PATH: /a}, prepend: {PATH: [/b]}}\n")
