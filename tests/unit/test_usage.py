"""Ring 1: both commands' --help (names, variables, examples) and the composer without torch.

torchrun_jsc's help must work where torch is missing (a login node): there it is simulated
by ``sys.modules["torch"] = None``, which makes ``import torch`` raise ImportError.
"""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.task.torchrun_jsc import usage

ROOT = Path(__file__).resolve().parents[2]
NO_TORCH = "import sys; sys.modules['torch'] = None; "


def python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, check=False)


def test_help_lists_every_variable_the_launcher_reads():
    sources = [p for p in (ROOT / "launcher/task/torchrun_jsc").glob("*.py") if p.name != "usage.py"]
    read = {m for p in sources for m in re.findall(r"TORCHRUN_JSC_[A-Z_]+", p.read_text())}
    listed = {re.match(r"\w+", name).group(0) for name, _ in usage.ENV_VARS}
    assert read, "no TORCHRUN_JSC_* name found in the launcher's sources"
    assert read <= listed, f"not in usage.ENV_VARS: {sorted(read - listed)}"
    # Being added to the decision in parallel: listed already.
    assert {"TORCHRUN_JSC_RESOLVE_TIMEOUT", "TORCHRUN_JSC_ADDRESS_FAMILY"} <= listed


def test_torchrun_jsc_help_without_torch():
    p = python(NO_TORCH + "from launcher.task.torchrun_jsc import main; sys.exit(main(['--help']))")
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("usage: torchrun_jsc ")
    assert "torch is not importable here" in p.stdout and "needs torch >= 1.9" in p.stdout
    for name, _ in usage.ENV_VARS:
        assert name in p.stdout
    assert "examples:" in p.stdout and "torchrun_jsc --nnodes=" in p.stdout
    assert p.stderr == ""


def test_torchrun_jsc_without_torch_refuses_to_launch_in_one_line():
    p = python(NO_TORCH + "from launcher.task.torchrun_jsc import main; "
               "sys.exit(main(['--nnodes=2', 'train.py']))")
    assert p.returncode == 2
    assert p.stdout == "" and len(p.stderr.splitlines()) == 1
    assert p.stderr.startswith("torchrun_jsc: cannot import torch")


@pytest.mark.parametrize("argv,prog", [
    (["-m", "launcher", "--help"], "python -m launcher"),
    (["-c", "import sys; from launcher.cli import main; sys.exit(main(['--help']))"],
     "jsc-compose"),
])
def test_composer_help_names_itself_and_shows_examples(argv, prog):
    p = subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True,
                       timeout=60, check=False)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith(f"usage: {prog} ")
    assert f"\nexamples:\n  {prog} render jobs/ddp_container.yaml" in p.stdout


def test_composer_never_imports_torch():
    """check, render and preview of every checked-in spec, with torch importable."""
    specs = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "jobs").glob("*.yaml"))
    code = ("import io, sys, contextlib; from launcher.cli import main\n"
            f"for s in {specs!r}:\n"
            "    with contextlib.redirect_stdout(io.StringIO()):\n"
            "        assert main(['check', s]) == 0, s\n"
            "        assert main(['render', s]) == 0, s\n"
            "        assert main(['preview', s, '--nodelist', 'jwb[0001-0002]']) == 0, s\n"
            "bad = sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.'))\n"
            "assert not bad, bad\n")
    p = python(code)
    assert p.returncode == 0, p.stderr[-2000:]


def _stub_torch_run():
    """A module with torch's parser shape (options, the script, REMAINDER for its args)."""
    import argparse
    import types

    def get_args_parser():
        p = argparse.ArgumentParser(prog="torchrun")
        p.add_argument("--nnodes", default="1:1")
        p.add_argument("training_script")
        p.add_argument("training_script_args", nargs=argparse.REMAINDER)
        return p
    return types.SimpleNamespace(get_args_parser=get_args_parser)


def test_version_names_this_distribution_without_torch():
    """JSC's PyPI torchrun_jsc owns the same command name; --version tells them apart."""
    p = python(NO_TORCH + "from launcher.task.torchrun_jsc import main; sys.exit(main(['--version']))")
    assert p.returncode == 0, p.stderr
    from launcher import __version__
    assert p.stdout.startswith(f"torchrun_jsc {__version__} (torchrun-jsc-kit, ")
    assert "HelmholtzAI-FZJ" in p.stdout and p.stderr == ""


def test_version_in_the_parser_leaves_the_scripts_own_version_alone(capsys):
    parser = usage.parser(_stub_torch_run())
    args = parser.parse_args(["--nnodes=2", "train.py", "--version"])
    assert args.training_script == "train.py" and args.training_script_args == ["--version"]
    assert "version" not in vars(args)  # the namespace stays torch's
    with pytest.raises(SystemExit) as e:
        parser.parse_args(["--nnodes=2", "--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.startswith("torchrun_jsc ")


def test_version_only_first_counts_before_torch_is_imported():
    assert usage.wants_version(["--version"])
    assert not usage.wants_version(["train.py", "--version"])
    assert not usage.wants_version([])


def _torch_19_run():
    """torch 1.9's shape: ``parse_args`` adds the legacy ``--use_env`` that ``run`` reads."""
    import types

    get_args_parser = _stub_torch_run().get_args_parser

    def parse_args(args):
        parser = mod.get_args_parser()
        parser.add_argument("--use_env", default=True, action="store_true")
        return parser.parse_args(args)

    mod = types.SimpleNamespace(get_args_parser=get_args_parser, parse_args=parse_args)
    return mod


@pytest.mark.parametrize("argv", [["--nnodes=2", "t.py", "--lr", "1"],
                                  ["--use_env", "t.py"],
                                  ["t.py", "--use_env"]])  # the script's own, not torchrun's
def test_namespace_is_what_torchs_own_parse_args_builds_legacy_options_included(argv):
    """Issue 30: on torch 1.9 the namespace lacked use_env and every launch died in run()."""
    run = _torch_19_run()
    get_args_parser, parse_args = run.get_args_parser, run.parse_args
    ours = usage.parser(run).parse_args(argv)
    assert vars(ours) == vars(parse_args(argv))
    assert ours.use_env is True
    # torch's module is left as it was, and the parser parses for real (not the recorder's stub)
    assert run.get_args_parser is get_args_parser and run.parse_args is parse_args
    with pytest.raises(SystemExit):
        usage.parser(run).parse_args(["--nnodes=2"])  # no script: argparse's usage error
