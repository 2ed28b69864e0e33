"""Ring 1: the CLI edge. Bad input exits 2 with one line naming file, YAML path and value,
no traceback, and nothing written; good input renders exactly the golden."""

import subprocess
import sys
from pathlib import Path

import pytest

from launcher.cli import main

ROOT = Path(__file__).resolve().parents[2]
GOOD = "job: {nodes: 2}\nprogram: [python3, t.py]\n"

BAD_SPECS = {
    "unknown_key": ("job: {nodes: 2, gpu_per_node: 4}\nprogram: [p]\n",
                    "job: unknown key 'gpu_per_node' (did you mean 'gpus_per_node'?)"),
    "wrong_type": ("job: {nodes: '2x'}\nprogram: [p]\n", "job.nodes: must be an integer, got '2x'"),
    "relative_bind": ("job: {nodes: 1}\nprogram: [p]\n"
                      "runtime: {kind: apptainer, image: i.sif, binds: [{source: data}]}\n",
                      "runtime.binds[0].source: source path must be absolute (or start with $VAR or ~, expanded on the node), got 'data'"),
    "empty_bind": ("job: {nodes: 1}\nprogram: [p]\n"
                   "runtime: {kind: apptainer, image: i.sif, binds: [{source: ''}]}\n",
                   "runtime.binds[0].source: must not be empty, got ''"),
    "missing_image": ("job: {nodes: 1}\nprogram: [p]\nruntime: {kind: enroot}\n",
                      "runtime.image: is required"),
    "zero_nodes": ("job: {nodes: 0}\nprogram: [p]\n", "job.nodes: must be between 1 and 100000, got 0"),
    "malformed": ("job: {nodes: 1\nprogram: [p]\n", "malformed YAML"),
    "duplicate": ("job: {nodes: 1}\njob: {nodes: 2}\nprogram: [p]\n", "duplicate key 'job'"),
}


def run_cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "launcher", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.parametrize("case", sorted(BAD_SPECS))
@pytest.mark.parametrize("command", ["render", "check", "submit"])
def test_bad_spec_one_line_exit_2_nothing_written(case, command, tmp_path):
    text, expected = BAD_SPECS[case]
    spec = tmp_path / f"{case}.yaml"
    spec.write_text(text)
    out = tmp_path / "out.job"
    args = [command, str(spec)] + (["-o", str(out)] if command != "check" else [])
    done = run_cli(*args, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith(f"{spec}: ") and expected in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == [spec.name]  # nothing written


def test_missing_file_exit_2(tmp_path):
    done = run_cli("render", str(tmp_path / "nope.yaml"), "-o", str(tmp_path / "x.job"))
    assert (done.returncode, done.stderr) == \
        (2, f"{tmp_path / 'nope.yaml'}: cannot read spec: No such file or directory\n")
    assert not (tmp_path / "x.job").exists()


def test_debug_shows_traceback(tmp_path):
    spec = tmp_path / "bad.yaml"
    spec.write_text(BAD_SPECS["zero_nodes"][0])
    done = run_cli("--debug", "check", str(spec))
    assert done.returncode != 0 and "Traceback" in done.stderr and "SpecError" in done.stderr
    done = run_cli("check", "--debug", str(spec))
    assert "Traceback" in done.stderr


def test_render_stdout_equals_golden():
    done = run_cli("render", "jobs/ddp_container.yaml")
    assert done.returncode == 0, done.stderr
    assert done.stdout == (ROOT / "jobs/ddp_container.job").read_text()


def test_render_to_file_and_overwrite(tmp_path):
    spec = tmp_path / "good.yaml"
    spec.write_text(GOOD)
    out = tmp_path / "good.job"
    out.write_text("old")
    assert main(["render", str(spec), "-o", str(out)]) == 0
    assert out.read_text().startswith("#!/bin/bash\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["good.job", "good.yaml"]


def test_render_into_missing_directory_is_one_line(tmp_path, capsys):
    spec = tmp_path / "good.yaml"
    spec.write_text(GOOD)
    assert main(["render", str(spec), "-o", str(tmp_path / "no/dir/x.job")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is in a directory that does not exist" in err


def test_check_ok(capsys):
    assert main(["check", str(ROOT / "jobs/ddp_venv.yaml")]) == 0
    assert "ok (torchrun, bare, 2 nodes" in capsys.readouterr().out


def test_preview(capsys):
    assert main(["preview", str(ROOT / "jobs/ddp_container.yaml"), "--nodelist",
                 "jwb[0001-0002]", "--job-id", "100"]) == 0
    out = capsys.readouterr().out
    assert "node 0 jwb0001: node_rank=0 is_host=yes" in out and "jwb0001i:29600" in out


def test_preview_bad_nodelist(capsys):
    assert main(["preview", str(ROOT / "jobs/ddp_container.yaml"), "--nodelist", "jwb[2-1]"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--nodelist: not a Slurm node list" in err


def test_check_image_rejects_non_apptainer(capsys):
    assert main(["check", "--image", str(ROOT / "jobs/ddp_venv.yaml")]) == 2
    assert "check --image runs the image here with Apptainer: apptainer images only" in \
        capsys.readouterr().err


def test_check_image_missing_image(tmp_path, capsys):
    spec = tmp_path / "a.yaml"
    spec.write_text(GOOD + f"runtime: {{kind: apptainer, image: {tmp_path}/none.sif}}\n")
    assert main(["check", "--image", str(spec)]) == 1
    assert "none.sif: image not found (build it with `make image`)" in capsys.readouterr().err


def test_kit_option_must_name_the_kits_package(tmp_path, capsys):
    """--kit DIR: a directory without the kit's node/job.sh is one line, exit 2."""
    assert main(["render", str(ROOT / "jobs/ddp_container.yaml"), "--kit", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not the kit's package directory" in err, err


def test_kit_option_renders_that_kit(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the kit is not below: an absolute path
    assert main(["render", str(ROOT / "jobs/ddp_container.yaml"), "--kit",
                 str(ROOT / "launcher")]) == 0
    assert f"\nkit={ROOT}/launcher\n" in capsys.readouterr().out


def test_output_onto_the_spec_is_refused(tmp_path, capsys):
    spec = tmp_path / "good.yaml"
    spec.write_text(GOOD)
    assert main(["render", str(spec), "-o", str(spec)]) == 2
    assert "-o: would overwrite the spec itself" in capsys.readouterr().err
    assert spec.read_text() == GOOD


@pytest.mark.parametrize("argv,script,extra", [
    (["submit", "S", "-o", "x.job", "--", "-A", "proj", "-o", "out-%j"], "x.job",
     ["-A", "proj", "-o", "out-%j"]),
    (["submit", "-o", "x.job", "S"], "x.job", []),
    (["submit", "S", "--", "--parsable"], "S.job", ["--parsable"]),
])
def test_submit_splits_sbatch_options_at_double_dash(tmp_path, monkeypatch, argv, script, extra):
    """Options after '--' go to sbatch unchanged; ours (-o) may come before or after SPEC."""
    (tmp_path / "S").write_text(GOOD)
    monkeypatch.chdir(tmp_path)
    calls = []
    monkeypatch.setattr("launcher.cli.sbatch", lambda s, e: calls.append((s, list(e))) or "7")
    assert main(argv) == 0
    assert calls == [(script, extra)]
    assert (tmp_path / script).is_file()


def test_double_dash_only_for_submit(tmp_path, capsys):
    spec = tmp_path / "s.yaml"
    spec.write_text(GOOD)
    with pytest.raises(SystemExit) as e:
        main(["render", str(spec), "--", "-A", "x"])
    assert e.value.code == 2
    assert "only taken by submit" in capsys.readouterr().err


@pytest.mark.parametrize("extra, warned", [
    ("job: {nodes: 2, cpus_per_task: 2}\nlaunch: {procs_per_node: 4}\n", True),
    ("job: {nodes: 2, cpus_per_task: 4}\nlaunch: {procs_per_node: 4}\n", False),
    ("job: {nodes: 2}\nlaunch: {procs_per_node: 4}\n", False),  # whole nodes by default
    ("job: {nodes: 2, cpus_per_task: 1}\nlaunch: {mode: srun, procs_per_node: 4}\n", False),
])
def test_check_warns_when_workers_would_share_a_core(tmp_path, extra, warned):
    spec = tmp_path / "w.yaml"
    spec.write_text(extra + "program: [python3, t.py]\n")
    done = run_cli("check", str(spec))
    assert done.returncode == 0, done.stderr
    if warned:
        assert done.stderr == (f"{spec}: job.cpus_per_task: warning: 4 worker processes per node "
                               "would share 2 CPU(s) (the per-node agent's task); ask for at "
                               "least 4\n")
    else:
        assert done.stderr == ""


def test_check_warns_when_whole_nodes_are_switched_off(tmp_path):
    spec = tmp_path / "w.yaml"
    spec.write_text("job: {nodes: 2, sbatch: {exclusive: false}}\nlaunch: {procs_per_node: 4}\n"
                    "program: [python3, t.py]\n")
    done = run_cli("check", str(spec))
    assert done.returncode == 0 and done.stderr == (
        f"{spec}: job.sbatch.exclusive: warning: without whole nodes or job.cpus_per_task the "
        "job gets 1 CPU per node, and all 4 worker processes of a node would run on that one "
        "core; set job.cpus_per_task\n")
    assert "#SBATCH --exclusive" not in run_cli("render", str(spec)).stdout
