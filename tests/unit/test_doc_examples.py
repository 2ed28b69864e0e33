"""Ring 1: the docs' examples are the program's real output (issue 43, item 4): README's
quickstart spec through `check` (its line count) and `preview` (each line shown is a real
line, in order; one ending in `...` is cut there), docs/guide/specs.md's example error
lines, docs/guide/spec-values.md's `$` rule for job.*, every extra the docs' pip install
commands name being one of pyproject.toml's, and a user's own script's header (no `make
jobs`)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import List, Tuple

import pytest

from launcher.cli import main
from launcher.model import SpecError
from launcher.render.jobscript import render_jobscript
from launcher.spec import parse_spec

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def block_after(text: str, marker: str, kind: str) -> str:
    """The first ```KIND fenced block after ``marker``."""
    rest = text[text.index(marker):]
    return re.search(rf"```{kind}\n(.*?)```", rest, re.S)[1]


def sessions(console: str) -> List[Tuple[str, List[str]]]:
    """($ command, its output lines) pairs of a console block."""
    out: List[Tuple[str, List[str]]] = []
    for line in console.splitlines():
        if line.startswith("$ "):
            out.append((line[2:], []))
        else:
            out[-1][1].append(line)
    return out


def shown_in_order(shown: List[str], real: List[str]) -> bool:
    """Each shown line is a real line (a line ending in '...' a prefix of one), in order."""
    it = iter(real)
    return all(any(r == s or (s.endswith("...") and r.startswith(s[:-3])) for r in it)
               for s in shown)


def test_readme_quickstart_check_and_preview_are_real(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SYSTEMNAME", raising=False)
    (tmp_path / "train.yaml").write_text(block_after(README, "**2. Write the spec**", "yaml"))
    runs = sessions(block_after(README, "**3. Check and preview**", "console"))
    assert [cmd.split()[:2] for cmd, _ in runs] == [["jsc-compose", "check"],
                                                    ["jsc-compose", "preview"]]
    for cmd, shown in runs:
        assert main(shlex.split(cmd.split("  #")[0])[1:]) == 0
        real = capsys.readouterr().out.replace(str(tmp_path), "/p/project/me").splitlines()
        assert shown and shown_in_order(shown, real), (cmd, shown, real)


SPECS_MD = (ROOT / "docs/guide/specs.md").read_text()
# Each example line of specs.md's "A bad spec" block, and a spec that gets it.
MESSAGES = {
    "runtime: unknown key 'bind'": "runtime: {kind: apptainer, image: a.sif, bind: []}",
    "runtime.binds[1].source": "runtime: {kind: apptainer, image: a.sif, binds: [/a, "
                               "{source: data, target: /d}]}",
    "job.nodes: must be between": None,
    "env.set.PATH": 'env: {set: {PATH: "/opt/bin:$PATH"}}',
    "job.output: directory 'logs'": None,
    "duplicate key": None,
}
SPECIAL = {"job.nodes: must be between": "job: {nodes: 0}\nprogram: [p]\n",
           "job.output: directory 'logs'": "job: {nodes: 1, output: 'logs/%x-%j.out'}\n"
                                           "program: [p]\n",
           "duplicate key": "job:\n  nodes: 1\n  nodes: 2\nprogram: [p]\n"}


def test_specs_md_error_examples_are_real(tmp_path, monkeypatch, capsys):
    shown = block_after(SPECS_MD, "A bad spec never produces a script", "").strip().splitlines()
    assert len(shown) == len(MESSAGES)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "jobs").mkdir()
    for line, (key, extra) in zip(shown, MESSAGES.items()):
        assert key in line
        text = SPECIAL.get(key) or f"job: {{nodes: 1}}\nprogram: [p]\n{extra}\n"
        (tmp_path / "jobs/x.yaml").write_text(text)
        assert main(["check", "jobs/x.yaml"]) == 2
        err = capsys.readouterr().err.strip().replace(str(tmp_path), "/home/me/repo")
        assert err == line


def test_spec_values_md_dollar_rule_for_job_keys():
    text = (ROOT / "docs/guide/spec-values.md").read_text()
    assert "| `job.name` | written as given, `$` included" in text
    assert parse_spec("job: {nodes: 1, name: a$HOME}\nprogram: [p]\n", "x.yaml").job.name \
        == "a$HOME"
    for key in ("time", "output", "error", "node_output", "partition", "account"):
        assert f"`job.{key}`" in text
        with pytest.raises(SpecError, match="sbatch/srun do not expand variables"):
            parse_spec(f"job: {{nodes: 1, {key}: $X}}\nprogram: [p]\n", "x.yaml")


def test_every_pip_extra_the_docs_name_exists():
    extras = set(re.findall(r"^(\w+) = \[", (ROOT / "pyproject.toml").read_text().split(
        "[project.optional-dependencies]")[1].split("\n[")[0], re.M))
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for extra in re.findall(r"pip install [^\n`]*?\.\[(\w+)\]", page.read_text()):
            assert extra in extras, f"{page.relative_to(ROOT)} names .[{extra}]"


def test_a_users_script_header_names_its_own_files():
    spec = parse_spec("job: {nodes: 1}\nprogram: [p]\n", "train.yaml")
    head = render_jobscript(spec, kit_dir="/p/kit/launcher").splitlines()[:4]
    assert head[2] == "# re-render: jsc-compose render train.yaml -o train.job"
    assert head[3] == "# Submit from the directory its relative paths refer to: sbatch train.job"
    own = parse_spec("job: {nodes: 1}\nprogram: [p]\n", "jobs/a.yaml")
    assert "make jobs" in render_jobscript(own, kit_dir="launcher").splitlines()[2]
    assert "make jobs" not in render_jobscript(own, kit_dir="/p/kit/launcher")
