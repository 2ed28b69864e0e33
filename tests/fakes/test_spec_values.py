"""Ring 2: spec values with $NAME, ${NAME} and ~/ (issue 18, item 2), run by bash with the
recording fakes: expanded on the node from the job's environment, every other character
byte-identical, and an unset name stops the job with one clear line."""

from pathlib import Path

import pytest
import yaml

from tests.helpers.cluster import HOSTILE, HOSTILE_NL, Cluster


@pytest.fixture
def fakes(tmp_path: Path) -> Cluster:
    return Cluster(tmp_path)


def spec(program, **sections: object) -> str:
    data = {"job": {"nodes": 2}, "program": ["python3", *program]}
    data.update(sections)
    return yaml.safe_dump(data, allow_unicode=True)


def test_program_expands_names_and_keeps_hostile_text(fakes):
    scratch = f"/scr/{HOSTILE}"  # a hostile value of the variable stays one argument too
    hostile = HOSTILE_NL.replace("$HOME", "$$HOME")  # $$: the literal text $HOME
    script = fakes.render(spec(["$SCRATCH/a", "${SCRATCH}b", "~/c", "~", "$$HOME", hostile,
                                f"--x={hostile}$SCRATCH", "$(id)$", "$1"]))
    done = fakes.run(script, SCRATCH=scratch)
    assert done.returncode == 0, done.stderr
    home = fakes.env["HOME"]
    runs = fakes.records("python3")
    assert len(runs) == 2
    for rec in runs:
        assert rec["argv"] == [f"{scratch}/a", f"{scratch}b", f"{home}/c", "~", "$HOME",
                               HOSTILE_NL, f"--x={HOSTILE_NL}{scratch}", "$(id)$", "$1"]
    assert not list(fakes.dir.parent.rglob("pwned*"))


def test_apptainer_image_and_binds_expand(fakes):
    (fakes.dir / "img.sif").write_text("")
    script = fakes.render(spec(["t.py"], runtime={
        "kind": "apptainer", "image": "$IMGDIR/img.sif",
        "binds": ["$SCRATCH/data", {"source": "~/in", "target": "/in", "read_only": True}]}))
    done = fakes.run(script, IMGDIR=str(fakes.dir), SCRATCH="/scr")
    assert done.returncode == 0, done.stderr
    home = fakes.env["HOME"]
    for rec in fakes.records("apptainer"):
        argv = rec["argv"]
        assert argv[argv.index("/scr/data:/scr/data") - 1] == "--bind"
        assert f"{home}/in:/in:ro" in argv and f"{fakes.dir}/img.sif" in argv


def test_unset_name_stops_the_job_in_one_line(fakes):
    script = fakes.render(spec(["$NO_SUCH_DIR/t.py"]))
    fakes.env.pop("NO_SUCH_DIR", None)
    done = fakes.run(script)
    assert done.returncode != 0
    assert ("jsc-compose: the spec uses $NO_SUCH_DIR, which is not set on "
            in done.stderr) and "(it is expanded on the node at run time)" in done.stderr
    assert not fakes.records("python3") and not fakes.records("srun")


def test_a_launcher_py_in_the_submit_directory_does_not_replace_the_ray_agent(tmp_path):
    """The Ray agent runs from the kit by path (python3 "$kit/task/run.py" ray-node), so a
    launcher.py in the submit directory, even on the PYTHONPATH, is never imported."""
    import subprocess
    import sys
    from launcher import kit
    from launcher.modes.common import command_argv
    from launcher.modes.ray import AGENT
    from launcher.shell import resolve
    from launcher.spec import parse_spec
    root = Path(__file__).resolve().parents[2]
    (tmp_path / "launcher.py").write_text("open('shadowed', 'w'); print('SHADOW')\n")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{tmp_path}:{root}"}
    run = lambda argv: subprocess.run([sys.executable, *argv[1:]], cwd=tmp_path, env=env,  # noqa: E731
                                      capture_output=True, text=True, timeout=60, check=False)
    # The trap: -m (or the PYTHONPATH) puts the submit directory first on sys.path.
    assert "SHADOW" in run(["python3", "-m", "launcher.task.ray", "--help"]).stdout
    (tmp_path / "shadowed").unlink()
    spec = parse_spec("job: {nodes: 1}\nlaunch: {mode: ray, procs_per_node: 1}\n"
                      "program: [python3, d.py]\n", "r.yaml")
    agent = resolve(command_argv(spec), {"kit": str(kit.installed())})  # as the job runs it
    assert spec.launch.command == AGENT
    assert agent == ["python3", f"{kit.installed()}/task/run.py", "ray-node"]
    done = run([*agent, "--help"])
    assert done.returncode == 0, done.stderr
    assert "SHADOW" not in done.stdout and "--head" in done.stdout
    assert not (tmp_path / "shadowed").exists()
