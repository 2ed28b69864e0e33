"""Ring 1: the job as one value (launcher/plan.py): `render --json` prints the plan the script
is rendered from, the purposes differ only where they must, the one --signal and the verdict
after the launch are settled in the plan, and a feature is one unit the plan asks (a toy
feature in the registry reaches the #SBATCH block, a paragraph, the tasks' names and the
launch without any other change).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import List, Optional

import pytest

from launcher import cli, kit, plan as plan_module
from launcher.features import FEATURES, Context, Feature
from launcher.render.jobscript import render, render_jobscript
from launcher.plan import SbatchLine, build_plan, settle_signal
from launcher.shell import Raw, Statement, sbatch_quote
from launcher.spec import load_spec, parse_spec

ROOT = Path(__file__).resolve().parents[2]
JOBS = sorted(p.name for p in (ROOT / "jobs").glob("*.yaml"))
BASE = "job: {nodes: 2, time: '1:00:00'}\nprogram: [python3, t.py]\n"


@pytest.mark.parametrize("name", JOBS)
def test_render_json_is_the_plan_the_script_is(name, capsys, monkeypatch):
    """Every checked-in job: the JSON's #SBATCH options, paragraphs, set-up step, steps and
    launch lines, put together, are the script `render` prints, line for line."""
    monkeypatch.chdir(ROOT)
    assert cli.main(["render", "--json", "--kit", "launcher", f"jobs/{name}"]) == 0
    data = json.loads(capsys.readouterr().out)
    script = (ROOT / "jobs" / name.replace(".yaml", ".job")).read_text()
    assert data["purpose"] == "submit" and data["spec"] == f"jobs/{name}"
    sbatch = [f"#SBATCH --{o['option']}" + ("" if o["value"] is None else
                                              f"={sbatch_quote(o['value'])}")
              for o in data["sbatch"]]
    assert [line for line in script.splitlines() if line.startswith("#SBATCH")] == sbatch
    body: List[str] = []
    for paragraph in data["paragraphs"]:
        body += paragraph["lines"] + [""]
    if data["setup"]:
        body += [f"# Once per node: {data['runtime']} setup.", " ".join(data["setup"]), ""]
    body += data["steps"] + data["launch"]["lines"]
    flat = script.replace(" \\\n    ", " ")  # shell.join's continuation lines joined
    assert flat.endswith("\nset -euo pipefail\n\n" + "\n".join(body).replace(" \\\n    ", " ")
                         + "\n")


def test_the_plan_for_each_purpose():
    """submit: the hook's prelude in every task, the hangs paragraph, the launch; doctor: the
    same set-up without the prelude and hangs paragraph, the checks instead of the launch;
    preview: no prelude; submitit: no log, hangs or requeue paragraph and no launch."""
    spec = parse_spec(BASE + "launch: {hang_timeout: 600}\n", "p.yaml")
    plans = {p: build_plan(spec, p, kit.DEFAULT) for p in ("submit", "doctor", "preview",
                                                            "submitit")}
    names = {p: [g.name for g in plan.paragraphs] for p, plan in plans.items()}
    assert names["submit"] == ["kit", "site", "geometry", "log", "hangs"]
    assert names["doctor"] == ["kit", "site", "geometry", "log"]
    assert names["submitit"] == ["kit", "site", "geometry"]
    assert plans["submit"].runtime.prelude == ("sh", kit.file("task/hook.sh"))
    assert all(not plans[p].runtime.prelude for p in ("doctor", "preview", "submitit"))
    assert plans["submit"].launch_lines[-2:] == ("jsc_wait_launch", 'exit "$launch_rc"')
    assert plans["submit"].launch_lines[1].startswith("jsc_watch 600 ")
    assert not plans["doctor"].launch_lines and "jsc_doctor json" in "".join(plans["doctor"].steps)
    assert not plans["submitit"].launch_lines and not plans["submitit"].steps
    assert render(plans["submit"]) == render_jobscript(spec, kit_dir=kit.DEFAULT)


@pytest.mark.parametrize("extra, owner, value", [
    ("", "hangs", "B:URG@60"),
    ("job: {nodes: 2, time: '1:00:00', requeue: {before: 90}}\n", "requeue", "B:USR2@90"),
    ("job: {nodes: 2, time: '1:00:00', sbatch: {signal: 'B:USR1@30'}}\n", "job.sbatch",
     "B:USR1@30"),
])
def test_one_signal_settled_in_the_plan(extra, owner, value):
    """hangs wants its stacks a minute early, requeue its checkpoint signal, the user may set
    one: sbatch keeps one --signal, and the plan picks it (job.sbatch > requeue > hangs)."""
    text = (extra + "program: [python3, t.py]\n") if extra else BASE
    plan = build_plan(parse_spec(text, "s.yaml"))
    signals = [o for o in plan.sbatch if o.option == "signal"]
    assert [(o.owner, o.value) for o in signals] == [(owner, value)]


def test_settle_signal_keeps_the_first_by_precedence():
    lines = [SbatchLine("signal", "B:URG@60", "hangs"), SbatchLine("nodes", "2", "job"),
             SbatchLine("signal", "B:USR2@90", "requeue")]
    assert settle_signal(lines) == lines[1:]
    assert settle_signal(lines[:2]) == lines[:2]


def test_the_verdict_after_the_launch():
    """Without a feature's verdict the launch's own status ends the script; requeue's
    verdict replaces it (one visible rule in build_plan)."""
    plain = build_plan(parse_spec(BASE, "v.yaml"))
    requeued = build_plan(parse_spec("job: {nodes: 2, time: '1:00:00', requeue: true}\n"
                                     "program: [python3, t.py]\n", "v.yaml"))
    assert plain.launch_lines[-2:] == ("jsc_wait_launch", 'exit "$launch_rc"')
    assert requeued.launch_lines[-2:] == ("jsc_wait_launch", "jsc_requeue_verdict USR2 3")


class Toy(Feature):
    """A feature as a contributor would add one: its own #SBATCH option, paragraph, name for
    the tasks, a step before the launch and a line before it."""

    name = "toy"

    def sbatch(self, ctx: Context):
        return [("comment", "toy")]

    def setup(self, ctx: Context) -> List[Statement]:
        return [Raw("toy_setup")]

    def exports(self, spec, purpose):
        return ("TOY_NAME",)

    def steps(self, ctx: Context) -> List[str]:
        return ["toy_step", ""] if ctx.purpose == "submit" else []

    def before_launch(self, ctx: Context) -> List[str]:
        return ["toy_before"]

    def verdict(self, ctx: Context) -> Optional[str]:
        return None


def test_a_new_feature_is_one_unit_and_a_registry_line(monkeypatch):
    """With Toy appended to the registry the plan carries each of its pieces where the
    protocol says, and an Enroot job forwards its name; nothing else was touched."""
    monkeypatch.setattr(plan_module, "FEATURES", FEATURES + (Toy(),))
    spec = load_spec(str(ROOT / "jobs" / "ddp_enroot.yaml"))
    spec = dataclasses.replace(spec, source="jobs/ddp_enroot.yaml")
    text = render_jobscript(spec, kit_dir=kit.DEFAULT)
    golden = (ROOT / "jobs" / "ddp_enroot.job").read_text()
    assert "#SBATCH --comment=toy\n" in text and "#SBATCH --comment" not in golden
    assert "\ntoy_setup\n\n" in text and "toy_step\n\n# Launch:" in text
    assert "\ntoy_before\n" in text
    def names(script: str) -> set:
        line = next(x for x in script.splitlines() if x.startswith("enroot_names="))
        return set(line.partition("=")[2].strip("'").split())
    assert names(text) == names(golden) | {"TOY_NAME"}
    rest = [line for line in text.splitlines() if line and not line.startswith(
        ("#SBATCH --comment", "toy_", "enroot_names="))]
    assert rest == [line for line in golden.splitlines()
                    if line and not line.startswith("enroot_names=")]
