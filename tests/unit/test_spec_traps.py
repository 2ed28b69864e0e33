"""Ring 1: the spec traps of issue 10 (items 4 and 5). Each one either does what the user
meant or is refused at `check` time with one line naming file, YAML path and value."""

import re
import textwrap
from pathlib import Path

import pytest

from launcher.cli import main
from launcher.render.jobscript import render_jobscript
from launcher.modes import plan_launch
from launcher.shell import PathExport, Var, word
from launcher.model import SpecError
from launcher.spec import parse_spec

ONE = "job: {nodes: 1}\nprogram: [x]\n"


def parse(text: str):
    return parse_spec(textwrap.dedent(text), "x.yaml")


def error(text: str) -> str:
    with pytest.raises(SpecError) as info:
        parse(text)
    return str(info.value)


def image(kind: str, ref: str) -> str:
    return ONE + f"runtime: {{kind: {kind}, image: '{ref}'}}\n"


@pytest.mark.parametrize("text, expected", [
    (ONE + "env: {set: {PATH: '/opt/bin:$PATH'}}",
     "x.yaml: env.set.PATH: values are exported literally and '$' is never expanded; to "
     "extend a variable at run time use env.prepend: {PATH: [DIR]} (or env.append), for a "
     "literal '$' write '$$', got '/opt/bin:$PATH'"),
    (ONE + "env: {prepend: {PATH: ['/a:/b']}}",
     "x.yaml: env.prepend.PATH[0]: entries are joined with ':'; list them separately, "
     "got '/a:/b'"),
    (ONE + "env: {append: {PATH: ['$HOME/bin']}}",
     "x.yaml: env.append.PATH[0]: values are exported literally and '$' is never expanded; "
     "write the directory itself, for a literal '$' write '$$', got '$HOME/bin'"),
    (ONE + "env: {prepend: {PATH: []}}",
     "x.yaml: env.prepend.PATH: must list at least one entry, got []"),
    (ONE + "env: {prepend: {1X: [a]}}",
     "x.yaml: env.prepend: keys must be environment variable names, got '1X'"),
    (ONE + "env: {append: {PATH: ['']}}",
     "x.yaml: env.append.PATH[0]: must not be empty, got ''"),
    (ONE + "env: {prepend: {PATH: [/a]}, pass: [PATH]}",
     "x.yaml: env.pass[0]: is also set in env.set, env.prepend or env.append; keep one, "
     "got 'PATH'"),
    (ONE + "launch: {command: 'torchrun --foo'}",
     "x.yaml: launch.command: must be one word or a list of words (argv), e.g. "
     "[torchrun, --log-dir=logs], got 'torchrun --foo'"),
    (ONE + "launch: {command: []}",
     "x.yaml: launch.command: must name the launcher, e.g. torchrun_jsc, got []"),
    ("job: {nodes: 1, sbatch: {exclusive: 1.5}}\nprogram: [x]",
     "x.yaml: job.sbatch.exclusive: must be true (a flag), false (left out), a string or an "
     "integer, got 1.5"),
    (ONE + "launch: {mode: horovod, mpi_plugin: 'pmix;id'}",
     "x.yaml: launch.mpi_plugin: must be an srun --mpi plugin name such as pmix, pmix_v4, "
     "pmi2 or none, got 'pmix;id'"),
    (ONE + "launch: {mode: horovod, mpi: mpirun, mpi_plugin: pmi2}",
     "x.yaml: launch.mpi_plugin: is srun's --mpi=PLUGIN; with launch.mpi: mpirun Open MPI "
     "starts the ranks itself, got 'pmi2'"),
    (ONE + "launch: {mode: srun, max_restarts: 3}",
     "x.yaml: launch.max_restarts: means nothing in mode 'srun': it is torchrun's "
     "--max_restarts (modes torchrun and mpirun_torchrun), got 3"),
    (ONE + "launch: {mode: horovod, command: torchrun}",
     "x.yaml: launch.command: means nothing in mode 'horovod': it is the per-node launcher "
     "of modes torchrun, mpirun_torchrun, accelerate, deepspeed and ray; put the program in "
     "program, got 'torchrun'"),
    (ONE + "launch: {mpi: srun}",
     "x.yaml: launch.mpi: means nothing in mode 'torchrun': it chooses how horovod's MPI "
     "ranks start, got 'srun'"),
    (ONE + "launch: {mode: mpirun_torchrun, mpi_plugin: pmix}",
     "x.yaml: launch.mpi_plugin: means nothing in mode 'mpirun_torchrun': it is srun's "
     "--mpi=PLUGIN for horovod's MPI ranks, got 'pmix'"),
])
def test_trap_is_one_line(text, expected):
    assert error(text) == expected


@pytest.mark.parametrize("kind, ref, words", [
    ("apptainer", "nvcr.io#nvidia/pytorch:24.01", "apptainer takes docker://REGISTRY/IMAGE"),
    ("apptainer", "enroot://x", "apptainer cannot run enroot:// images"),
    ("enroot", "docker://nvcr.io#nvidia/pytorch:24.01", "creates its container from a local "
     "squashfs file"),
    ("enroot", "nvcr.io#nvidia/pytorch:24.01", "enroot import -o image.sqsh"),
    ("enroot", "image.sif", "enroot create cannot read SIF images"),
    ("enroot", "rootfs.tar", "must be a squashfs file ending in .sqsh or .squashfs"),
    ("pyxis", "image.sif", "pyxis cannot run SIF images"),
    ("pyxis", "oras://reg/img:1", "pyxis cannot import oras:// images"),
    ("pyxis", "nvcr.io/nvidia/pytorch:24.01", "write nvcr.io#nvidia/pytorch:24.01 (as written, "
     "nvcr.io would be taken as a Docker Hub user)"),
    ("pyxis", "docker://u@localhost/img", "write docker://u@localhost#img"),
])
def test_image_the_runtime_cannot_use_is_refused(kind, ref, words):
    message = error(image(kind, ref))
    assert message.startswith("x.yaml: runtime.image: ") and words in message
    assert message.endswith(f", got {ref!r}")


@pytest.mark.parametrize("kind, ref", [
    ("apptainer", "image.sif"), ("apptainer", "/p/images/sandbox/"),
    ("apptainer", "docker://nvcr.io/nvidia/pytorch:24.01"), ("apptainer", "oras://r/i:1"),
    ("apptainer", "library://u/c/i:1"), ("apptainer", "image.sqsh"),
    ("enroot", "image.sqsh"), ("enroot", "/p/images/x.squashfs"),
    ("pyxis", "nvcr.io#nvidia/pytorch:24.01"), ("pyxis", "user@nvcr.io#nvidia/pytorch"),
    ("pyxis", "ubuntu:24.04"), ("pyxis", "nvidia/cuda"), ("pyxis", "docker://nvcr.io#nv/pt"),
    ("pyxis", "image.sqsh"), ("pyxis", "/p/images/x.squashfs"),
])
def test_image_the_runtime_can_use_is_accepted(kind, ref):
    assert parse(image(kind, ref)).runtime.image == ref


def test_path_export_renders_each_combination():
    assert PathExport("P", ("/a", "/b c")).render() == 'export P="/a:/b c${P:+:${P}}"'
    assert PathExport("P", (), ("/z",)).render() == 'export P="${P:+${P}:}/z"'
    assert PathExport("P", ("/a",), ("/z",)).render() == 'export P="/a${P:+:${P}}:/z"'
    assert PathExport("P", ('$x"`\\',)).render() == 'export P="\\$x\\"\\`\\\\${P:+:${P}}"'


def test_env_prepend_append_in_order_after_set():
    spec = parse(ONE + "env: {set: {A: 'p$$q'}, prepend: {PATH: [/opt/bin, /x], A: /pre},"
                       " append: {LD_LIBRARY_PATH: /opt/lib, A: [/post]}}")
    assert spec.env.values == (("A", "p$q"),)
    assert spec.env.prepend == (("A", ("/pre",)), ("PATH", ("/opt/bin", "/x")))
    assert spec.env.names == ("A", "LD_LIBRARY_PATH", "PATH")
    text = render_jobscript(spec)
    lines = ["export A='p$q'", 'export A="/pre${A:+:${A}}:/post"',
             'export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+${LD_LIBRARY_PATH}:}/opt/lib"',
             'export PATH="/opt/bin:/x${PATH:+:${PATH}}"']
    at = [text.index(line + "\n") for line in lines]
    assert at == sorted(at)


def test_enroot_forwards_edited_names():
    spec = parse(image("enroot", "i.sqsh") + "env: {prepend: {PATH: [/opt/bin]}}")
    text = render_jobscript(spec)
    forwarded = re.search(r"^enroot_names='([^']*)'$", text, re.M)[1].split()
    assert "PATH" in forwarded and "SLURM_*" in forwarded


def test_command_as_argv_and_mpi_plugin():
    spec = parse(ONE + "launch: {command: [torchrun, --log-dir=l o g], max_restarts: 1}")
    assert plan_launch(spec)[1].task[:3] == ("torchrun", "--log-dir=l o g",
                                             word("--nnodes=", Var("nnodes")))
    assert "one torchrun --log-dir=l o g per node, 1 process each" in render_jobscript(spec)
    hvd = parse(ONE + "launch: {mode: horovod, mpi_plugin: pmi2}")
    assert "--mpi=pmi2" in plan_launch(hvd)[1].starter
    assert "via srun --mpi=pmi2" in render_jobscript(hvd)


def test_sbatch_false_omits_the_option():
    spec = parse("job: {nodes: 1, sbatch: {exclusive: false, requeue: true, mem: 0}}\n"
                 "program: [x]")
    assert spec.job.sbatch == (("mem", "0"), ("requeue", None))
    assert "exclusive" not in render_jobscript(spec)


@pytest.mark.parametrize("launch, gpus, comment", [
    ("{mode: srun, procs_per_node: 4}", 0, "# Launch: 4 tasks per node, ranks from"),
    ("{mode: srun}", 2,
     "# Launch: 2 tasks per node, one per GPU, socket by socket, ranks from"),
    ("{mode: srun, procs_per_node: 1}", 4, "# Launch: 1 task per node, ranks from"),
    ("{mode: horovod, procs_per_node: 3}", 0, "# Launch: 3 MPI ranks per node via srun"),
    ("{mode: torchrun}", 0, "# Launch: one torchrun_jsc per node, 1 process each."),
    ("{mode: mpirun_torchrun}", 2, "starts one torchrun_jsc per node, 2 processes each."),
])
def test_launch_comment_true_for_every_geometry(launch, gpus, comment):
    spec = parse(f"job: {{nodes: 1, gpus_per_node: {gpus}}}\nprogram: [x]\nlaunch: {launch}")
    assert comment in render_jobscript(spec)


def test_node_log_line_expands_job_name_and_id():
    text = render_jobscript(parse("job: {nodes: 1, node_output: 'l/%x.%j.%%.%t.n%n'}\n"
                                  "program: [x]"))
    assert ('echo \'per-node logs:\' "l/${SLURM_JOB_NAME}.${SLURM_JOB_ID}.%.%t.nN" \\\n'
            '    "(N = node index 0..$((nnodes - 1)))"') in text
    plain = render_jobscript(parse("job: {nodes: 1, node_output: 'all-%j.out'}\nprogram: [x]"))
    assert 'echo \'per-node logs:\' "all-${SLURM_JOB_ID}.out"\n' in plain


def spec_file(tmp: Path, job: str) -> Path:
    path = tmp / "s.yaml"
    path.write_text(f"job: {job}\nprogram: [x]\n")
    return path


@pytest.mark.parametrize("command", [["check"], ["render", "-o", "s.job"],
                                     ["submit", "-o", "s.job"]])
def test_missing_log_directory_refused_at_the_cli_edge(command, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    spec = spec_file(tmp_path, "{nodes: 1, output: 'logs/%x-%j.out', error: 'errs/e.err'}")
    monkeypatch.setattr("launcher.cli.sbatch", lambda s, e: pytest.fail("sbatch called"))
    assert main([command[0], str(spec), *command[1:]]) == 2
    err = capsys.readouterr().err
    assert err == (f"{spec}: job.output: directory 'logs' does not exist (relative to "
                   f"{tmp_path}, where the job starts); create it first: Slurm would fail "
                   "the job without any log, got 'logs/%x-%j.out'\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"]
    (tmp_path / "logs").mkdir()
    assert main([command[0], str(spec), *command[1:]]) == 2
    assert "job.error: directory 'errs' does not exist" in capsys.readouterr().err


def test_log_directory_not_checked_by_a_dry_run_or_with_patterns(tmp_path, monkeypatch,
                                                                  capsys):
    monkeypatch.chdir(tmp_path)
    spec = spec_file(tmp_path, "{nodes: 1, output: 'logs/%x-%j.out'}")
    assert main(["render", str(spec)]) == 0  # stdout only: pure, nothing looked up
    spec = spec_file(tmp_path, "{nodes: 1, output: 'logs-%u/%j.out'}")
    assert main(["check", str(spec)]) == 0
    assert "job.output directory 'logs-%u' holds %-patterns: not checked" in \
        capsys.readouterr().out


def test_log_directory_relative_to_sbatch_chdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "run" / "logs").mkdir(parents=True)
    spec = spec_file(tmp_path, "{nodes: 1, output: 'logs/o.out', sbatch: {chdir: run}}")
    assert main(["check", str(spec)]) == 0


def test_submit_with_sbatch_log_options_leaves_the_check_to_sbatch(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = spec_file(tmp_path, "{nodes: 1, output: 'logs/%x-%j.out'}")
    calls = []
    monkeypatch.setattr("launcher.cli.sbatch", lambda s, e: calls.append(list(e)) or "7")
    assert main(["submit", str(spec), "--", "-A", "p", "--output=o-%j.out"]) == 0
    assert calls == [["-A", "p", "--output=o-%j.out"]]
    assert main(["submit", str(spec), "--", "-A", "p"]) == 2  # the spec's logs/ is missing


@pytest.mark.parametrize("path, msg", [
    ("/tmp/enroot-$USER", "no shell expansion"),
    ("/tmp/enroot-`id -u`", "no shell expansion"),
    ("/tmp/enroot-{home}", "the only placeholders are {user}, {uid}, {job_id}"),
    ("/tmp/enroot-{user", "the only placeholders are"),
    ("tmp/enroot", "must be an absolute node-local path"),
])
def test_enroot_data_path_placeholders_only(path, msg):
    with pytest.raises(SpecError, match=re.escape(msg)):
        parse(ONE + f"runtime: {{kind: enroot, image: i.sqsh, data_path: '{path}'}}\n")


def test_enroot_data_path_filled_in_on_the_node():
    spec = parse(ONE + "runtime: {kind: enroot, image: i.sqsh, data_path: '/tmp/e-{user}/{job_id}'}\n")
    text = render_jobscript(spec)
    assert ('enroot_user="$(id -un)"\n'
            'export ENROOT_DATA_PATH="/tmp/e-${enroot_user}/${SLURM_JOB_ID}"') in text
