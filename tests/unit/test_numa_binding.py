"""Ring 1: GPU-NUMA binding, `launch.numa_binding` (modes torchrun and mpirun_torchrun) ->
torchrun's own `--numa-binding=MODE` on torchrun_jsc's command line, checked when the spec is
loaded; torchrun_jsc on a torch without the flag (< 2.9) or without numactl stops in one line.

torch is simulated (no torch import): a stand-in `torch.distributed.run` whose parser has the
flag (torch >= 2.9) or not (older), as in tests/unit/test_usage.py.
"""

import argparse
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from launcher.render.jobscript import render_jobscript
from launcher.modes.common import NUMA_BINDINGS
from launcher.spec import parse_spec
from launcher.task.torchrun_jsc import usage
from tests.unit.test_spec_traps import error

ROOT = Path(__file__).resolve().parents[2]


def render(text: str) -> str:
    return render_jobscript(parse_spec(textwrap.dedent(text), "x.yaml"))


@pytest.mark.parametrize("mode", ["torchrun", "mpirun_torchrun"])
@pytest.mark.parametrize("binding", NUMA_BINDINGS)
def test_numa_binding_reaches_torchrun_jsc(mode, binding):
    text = render(f"job: {{nodes: 2}}\nlaunch: {{mode: {mode}, numa_binding: {binding}}}\n"
                  "program: [python3, train.py]\n")
    flat = " ".join(text.replace("\\\n", " ").split())  # the launch line, unwrapped
    assert f" --max_restarts=0 --numa-binding={binding} --no_python python3 train.py &" in flat
    assert flat.count("--numa-binding") == 1


def test_off_by_default():
    assert "numa" not in render("job: {nodes: 2}\nprogram: [python3, train.py]\n")


@pytest.mark.parametrize("text,expected", [
    ("job: {nodes: 2}\nlaunch: {numa_binding: gpu}\nprogram: [p]",
     "x.yaml: launch.numa_binding: must be one of node, socket, exclusive, core-complex, "
     "got 'gpu'"),
    ("job: {nodes: 2}\nlaunch: {numa_binding: true}\nprogram: [p]",
     "x.yaml: launch.numa_binding: must be one of node, socket, exclusive, core-complex, "
     "got True"),
    ("job: {nodes: 2}\nlaunch: {mode: srun, numa_binding: node}\nprogram: [p]",
     "x.yaml: launch.numa_binding: means nothing in mode 'srun': it is torchrun's "
     "--numa-binding (modes torchrun and mpirun_torchrun), got 'node'"),
])
def test_bad_numa_binding_is_one_line(text, expected):
    assert error(text) == expected


def torch_parser(with_flag: bool) -> argparse.ArgumentParser:
    """The shape of torch's torchrun parser that matters here."""
    p = argparse.ArgumentParser(prog="torchrun")
    p.add_argument("--nnodes", default="1")
    p.add_argument("--no-python", "--no_python", action="store_true")
    if with_flag:
        p.add_argument("--numa-binding", "--numa_binding", choices=NUMA_BINDINGS, default=None)
    p.add_argument("training_script")
    p.add_argument("training_script_args", nargs=argparse.REMAINDER)
    return p


class Run:
    def __init__(self, with_flag: bool) -> None:
        self.get_args_parser = lambda: torch_parser(with_flag)


@pytest.mark.parametrize("flag", usage.NUMA_FLAGS)
def test_numa_problem_rules(flag):
    which = {"numactl": "/usr/bin/numactl"}.get
    old = usage.parser(Run(False)).parse_args([f"{flag}=node", "--no-python", "t.py"])
    assert usage.numa_problem(old, "2.7.1+cu128", which) == (
        "--numa-binding (launch.numa_binding) needs torch >= 2.9 in the image; this image has "
        "torch 2.7.1+cu128")
    new = usage.parser(Run(True)).parse_args([f"{flag}=socket", "t.py"])
    assert usage.numa_problem(new, "2.9.0", which) == ""
    assert "which is not on the PATH here: install numactl" in \
        usage.numa_problem(new, "2.9.0", {}.get)
    # Not asked for: no problem on any torch, with or without numactl; the script's own
    # --numa-binding (after the training script) is the script's.
    for with_flag in (False, True):
        args = usage.parser(Run(with_flag)).parse_args(["t.py", f"{flag}=node"])
        assert args.training_script_args == [f"{flag}=node"]
        assert usage.numa_problem(args, "2.7.1", {}.get) == ""


FAKE_TORCH = textwrap.dedent("""\
    import argparse, sys, types
    torch = types.ModuleType("torch"); torch.__version__ = VERSION
    dist = types.ModuleType("torch.distributed"); run = types.ModuleType("torch.distributed.run")
    sys.path.insert(0, "tests/unit")
    from test_numa_binding import torch_parser
    run.get_args_parser = lambda: torch_parser(WITH_FLAG)
    torch.distributed = dist; dist.run = run
    sys.modules.update({"torch": torch, "torch.distributed": dist, "torch.distributed.run": run})
    from launcher.task.torchrun_jsc import main
    sys.exit(main(["--nnodes=2", "--numa-binding=node", "--no-python", "train.py"]))
""")


@pytest.mark.parametrize("version,with_flag,path,expected", [
    ("2.7.1", False, None, "torchrun_jsc: error: --numa-binding (launch.numa_binding) needs "
     "torch >= 2.9 in the image; this image has torch 2.7.1"),
    ("2.9.0", True, "/nonexistent", "torchrun_jsc: error: --numa-binding "
     "(launch.numa_binding) runs every worker under numactl, which is not on the PATH here: "
     "install numactl in the image (the kit's images have it)"),
])
def test_torchrun_jsc_refuses_in_one_line(version, with_flag, path, expected):
    code = FAKE_TORCH.replace("VERSION", repr(version)).replace("WITH_FLAG", str(with_flag))
    env = {"PATH": path} if path else None
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                       timeout=60, check=False, env=env)
    assert (p.returncode, p.stdout, p.stderr) == (2, "", expected + "\n")
