"""Ring 1: the container-runtime units (launcher/runtimes/): the registry, one bind rule per
runtime behind the spec's check, submitit's folder check and the jobscript's guard on the
submit directory, and THE per-node srun shared by the set-up step and the doctor."""

from __future__ import annotations

import json
import subprocess
import typing

import pytest

from launcher import __version__, kit
from launcher.features.preflight import doctor_lines
from launcher.model import RuntimeKind, SpecError
from launcher.runtimes import RUNTIMES, ContainerRuntime, node_srun, runtime_for
from launcher.shell import join, render_statement
from launcher.spec import parse_spec
from launcher.submitit import submitit_plan


IMAGES = {"apptainer": "i.sif", "enroot": "i.sqsh", "pyxis": "i.sqsh"}
# (path, the characters in it that Enroot's mount syntax cannot hold, Apptainer's)
PATHS = [("/ok/path-1_x.y", [], []), ("/a:b", ["':'"], ["':'"]), ("/a,b", ["','"], ["','"]),
         ("/a b", ["' '"], []), ("/a\tb", ["'\\t'"], []),
         ("/a: b,c", ["':'", "','", "' '"], ["':'", "','"])]


def spec_for(kind: str, extra: str = ""):
    return parse_spec(f"job: {{nodes: 2}}\nruntime: {{kind: {kind}, image: {IMAGES[kind]}"
                      f"{extra}}}\nlaunch: {{mode: srun}}\nprogram: [p]", "x.yaml")


def test_the_registry_is_the_list_of_runtimes():
    assert tuple(RUNTIMES) == typing.get_args(RuntimeKind)
    for kind, cls in RUNTIMES.items():
        assert cls.kind == kind and issubclass(cls, ContainerRuntime) and "kind" in cls.keys


@pytest.mark.parametrize("kind", ["apptainer", "enroot", "pyxis"])
@pytest.mark.parametrize("path,enroot_bad,apptainer_bad", PATHS)
def test_one_bind_rule_for_spec_submitit_and_the_submit_directory(kind, path, enroot_bad,
                                                                  apptainer_bad):
    bad = apptainer_bad if kind == "apptainer" else enroot_bad
    rule = RUNTIMES[kind].bind_rule
    assert rule is not None and rule.found(path) == bad
    # The spec's bind check.
    if bad:
        with pytest.raises(SpecError) as err:
            spec_for(kind, f", binds: [{json.dumps(path)}]")
        assert str(err.value) == (f"x.yaml: runtime.binds[0].source: {kind} cannot express a "
                                  f"path containing {' or '.join(bad)}, got {path!r}")
    else:
        assert spec_for(kind, f", binds: [{json.dumps(path)}]").runtime.binds[0].source == path
    # The jobscript's guard on the kit's and the submit directory (launcher/node/job.sh
    # jsc_bindable): bash's glob agrees with the rule.
    (guard,) = runtime_for(spec_for(kind)).cwd_guard()
    script = (f'kit={kit.installed()}\nsource "$kit/node/job.sh" {__version__}\n'
              'PWD="$1"\n' + render_statement(guard))
    done = subprocess.run(["bash", "-c", script, "guard", path], capture_output=True, text=True)
    assert (done.returncode, bool(done.stderr)) == ((1, True) if bad else (0, False))
    if bad:
        assert done.stderr == f"{kind} cannot bind {path} (it contains {rule.what()})\n"
    # submitit's folder check (pyxis: refused before the folder is looked at).
    if kind != "pyxis":
        if bad:
            with pytest.raises(ValueError, match=f"^{kind} cannot bind the submitit folder"):
                submitit_plan(spec_for(kind), path + "/%j")
        else:
            assert submitit_plan(spec_for(kind), path + "/%j").python.startswith(
                'bash "${kit}/node/task.sh" srun')


def test_one_per_node_srun_for_the_set_up_and_the_doctor():
    spec = spec_for("enroot")
    rt = runtime_for(spec)
    prefix = join(node_srun(kill_on_bad_exit=False), width=10**9)
    assert prefix == ('srun "--nodes=${nnodes}" "--ntasks=${nnodes}" --ntasks-per-node=1 '
                      '"--cpus-per-task=${cpus_per_node}"')
    setup = join(rt.setup_step(), width=10**9)
    assert setup.startswith(prefix.replace("srun ", "srun --kill-on-bad-exit=1 ", 1) +
                            ' bash "${kit}/node/enroot-setup.sh"')
    # The doctor's step: the same srun, without --kill-on-bad-exit (every node reports).
    step = next(line for line in doctor_lines(spec, rt, "table")
                if line.startswith("jsc_doctor table srun "))
    assert step.replace(" \\\n    ", " ").startswith(
        "jsc_doctor table " + prefix + ' python3 -I "${kit}/node/run.py"')

