"""Ring 1: the spec-value traps of issue 18 (item 2): Slurm times and numbers read as the
user wrote them, `$VAR`/`~` in paths and program arguments, image references, the
node-local submit directory and shadowing by files in the submit directory."""


import pytest

from launcher.render.jobscript import render_jobscript
from launcher.shell import expansion, quote
from launcher.submitit import submitit_plan
from launcher.render.venvjob import render_venv_job
from launcher.cli import main
from launcher.submit import submit_warnings
from tests.unit.test_spec_traps import error, parse

ONE = "job: {nodes: 1}\nprogram: [x]\n"




@pytest.mark.parametrize("written", [
    "24:00:00", "'24:00:00'", "12:00:00", "1:30:00", "30:00", "90", "'90'", "1-12:00:00",
    "00:30:00", "2-0", "0:30"])
def test_slurm_time_renders_exactly_as_written(written):
    spec = parse(f"job: {{nodes: 1, time: {written}}}\nprogram: [x]\n")
    text = written.strip("'")
    assert spec.job.time == text
    assert f"#SBATCH --time={text}\n" in render_jobscript(spec)


@pytest.mark.parametrize("written, minutes", [("24:00:00", 1440), ("1:30:00", 90),
                                              ("30:00", 30), ("90", 90), ("1-12:00:00", 2160)])
def test_submitit_gets_the_minutes_the_user_meant(written, minutes):
    spec = parse(f"job: {{nodes: 1, time: {written}}}\nprogram: [x]\n")
    assert submitit_plan(spec, "/f").parameters["time"] == minutes


@pytest.mark.parametrize("time, before, seconds", [
    ("24:00:00", 300, 300), ("24:00:00", "5:00", 300), ("2:00:00", "'1:00:00'", 3600)])
def test_requeue_before_is_checked_against_the_real_time(time, before, seconds):
    spec = parse(f"job: {{nodes: 1, time: {time}, requeue: {{before: {before}}}}}\n"
                 "program: [x]\n")
    assert spec.job.requeue.before == seconds
    assert f"#SBATCH --signal=B:USR2@{seconds}\n" in render_jobscript(spec)


def test_requeue_before_a_short_time_is_still_refused():
    # 24:00 was 1440 s (base-60) before; it is 24 minutes now, so before=1800 is too late.
    assert error("job: {nodes: 1, time: 24:00, requeue: {before: 1800}}\nprogram: [x]\n") == (
        "x.yaml: job.requeue.before: must be less than job.time (24:00 = 1440 s), or the "
        "signal would come at the start, got 1800")


@pytest.mark.parametrize("text, expected", [
    ("job: {nodes: 1, time: 1.5}\nprogram: [x]",
     "x.yaml: job.time: must be a Slurm time: minutes (90), M:S, H:M:S (24:00:00), D-H, "
     "D-H:M or D-H:M:S (1-12:00:00), got 1.5"),
    ("job: {nodes: 1:30}\nprogram: [x]", "x.yaml: job.nodes: must be an integer, got '1:30'"),
    ("job: {nodes: 1, time: 2:00:00, requeue: {before: 2 min}}\nprogram: [x]",
     "x.yaml: job.requeue.before: must be seconds (e.g. 300) or a Slurm time such as 5:00 "
     "or 1:00:00, got '2 min'"),
    ("job: {nodes: 1}\nprogram: [x, --flag, yes]",
     "x.yaml: program[2]: must be a string; quote it to keep the word as written (YAML "
     "reads true/false/yes/no/on/off and null/~ unquoted), got True"),
    ("job: {nodes: 1}\nprogram: [x, ~]",
     "x.yaml: program[1]: must be a string; quote it to keep the word as written (YAML "
     "reads true/false/yes/no/on/off and null/~ unquoted), got None"),
])
def test_value_traps_are_one_line(text, expected):
    assert error(text) == expected


def test_no_base60_integer_reaches_sbatch_options():
    spec = parse("job: {nodes: 1, sbatch: {time-min: 12:00:00, delay-boot: 30:00}}\n"
                 "program: [x]\n")
    text = render_jobscript(spec)
    assert "#SBATCH --time-min=12:00:00\n" in text and "#SBATCH --delay-boot=30:00\n" in text


def test_numbers_in_program_keep_the_users_spelling():
    spec = parse("job: {nodes: 1}\nprogram: [python3, t.py, --lr, 0.001, --wd, 1e-4, "
                 "--n, 010, --m, 1_000, --x, 1.0, --h, 0x1f, --d, 2024-01-01, --t, 1:30]\n")
    assert spec.program[1:] == ("t.py", "--lr", "0.001", "--wd", "1e-4", "--n", "010", "--m",
                                "1_000", "--x", "1.0", "--h", "0x1f", "--d", "2024-01-01",
                                "--t", "1:30")


def test_shell_expansion_parts():
    assert quote(expansion("$SCRATCH/img.sif")) == '"${SCRATCH}/img.sif"'
    assert quote(expansion("${PROJECT}/x y")) == '"${PROJECT}/x y"'
    assert quote(expansion("~/img.sif")) == '"${HOME}/img.sif"'
    assert expansion("~") == "~" and expansion("~x/y") == "~x/y"
    assert expansion("a$$b") == "a$b"
    assert expansion("$(id) `id` $1 $") == "$(id) `id` $1 $"
    assert quote(expansion('$A"`\\$(x)$$B')) == '"${A}\\"\\`\\\\\\$(x)\\$B"'


@pytest.mark.parametrize("kind, image, expected", [
    ("apptainer", "$SCRATCH/img.sif", ' "${SCRATCH}/img.sif" '),
    ("apptainer", "~/img.sif", ' "${HOME}/img.sif" '),
    ("pyxis", "${PROJECT}/img.sqsh", '"--container-image=${PROJECT}/img.sqsh"'),
    ("enroot", "$SCRATCH/img.sqsh", 'jsc_enroot_name img "${SCRATCH}/img.sqsh"'),
])
def test_image_expands_on_the_node(kind, image, expected):
    text = render_jobscript(parse(ONE + f"runtime: {{kind: {kind}, image: '{image}'}}\n"))
    assert expected in text
    assert "for name in " in text and "which is not set on $(hostname)" in text


def test_venv_binds_and_program_expand_and_unset_names_are_checked_first():
    spec = parse("job: {nodes: 1}\nsite: {venv: $SCRATCH/venv}\n"
                 "runtime: {kind: apptainer, image: i.sif, binds: ['$PROJECT/data', "
                 "{source: '~/in', target: /in, read_only: true}], cache_dir: $SCRATCH/c}\n"
                 "program: [python3, '$HOME/t.py', --out, '${SCRATCH}/o', '$$HOME']\n")
    text = render_jobscript(spec)
    assert "for name in HOME PROJECT SCRATCH; do\n" in text
    assert text.index("for name in") < text.index('source "${SCRATCH}/venv/bin/activate"')
    assert '--bind "${PROJECT}/data:${PROJECT}/data" ' in text.replace(" \\\n    ", " ")
    assert '--bind "${HOME}/in:/in:ro"' in text.replace(" \\\n    ", " ")
    assert 'export APPTAINER_CACHEDIR="${SCRATCH}/c"' in text
    assert '"${HOME}/t.py" --out "${SCRATCH}/o" \'$HOME\'' in text


def test_no_expansion_leaves_goldens_alone():
    text = render_jobscript(parse(ONE))
    assert "for name in" not in text


@pytest.mark.parametrize("text, expected", [
    (ONE.replace("[x]", "[x, '${X:-y}']"),
     "x.yaml: program[1]: only $NAME and ${NAME} are expanded (at run time, on the node); "
     "${NAME:-...} and other operators are not: write the value, or '$$' for a literal '$', "
     "got '${X:-y}'"),
    (ONE + "runtime: {kind: apptainer, image: '${IMG:?}'}",
     "x.yaml: runtime.image: only $NAME and ${NAME} are expanded"),
    (ONE + "site: {venv_build: {requirements: '$SCRATCH/req.txt'}}",
     "x.yaml: site.venv_build.requirements: is used literally: '$VAR' and '~' are not "
     "expanded here; write the value itself (docs/guide/spec-values.md lists the keys that expand "
     "them), got '$SCRATCH/req.txt'"),
    (ONE + "runtime: {kind: apptainer, image: i.sif, binds: [data/x]}",
     "x.yaml: runtime.binds[0].source: source path must be absolute (or start with $VAR or "
     "~, expanded on the node), got 'data/x'"),
    # Expanded once, by the batch script: a per-task value would be the first task's everywhere.
    (ONE.replace("[x]", "[x, --rank, $SLURM_PROCID]"),
     "x.yaml: program[2]: $SLURM_PROCID differs between tasks and nodes, but the spec's $VARs "
     "are expanded once, in the batch script on the first node: read SLURM_PROCID in your "
     "program (os.environ), or write '$$SLURM_PROCID' for a literal '$', got '$SLURM_PROCID'"),
    (ONE.replace("[x]", "[x, '--out=${SCRATCH}/run-${LOCAL_RANK}']"),
     "x.yaml: program[1]: $LOCAL_RANK differs between tasks and nodes"),
    (ONE + "launch: {command: [bash, -c, 'echo $SLURM_NODEID']}",
     "x.yaml: launch.command[2]: $SLURM_NODEID differs between tasks and nodes"),
])
def test_expansion_traps_are_one_line(text, expected):
    assert error(text).startswith(expected)


def test_per_task_names_pass_literally_with_a_double_dollar():
    text = render_jobscript(parse(ONE.replace("[x]", "[x, --rank=$$SLURM_PROCID, $SLURM_JOB_ID]")))
    assert "'--rank=$SLURM_PROCID'" in text  # literal for the program (or a shell it starts)
    assert '"${SLURM_JOB_ID}"' in text       # the same on every node: expanded


def test_venv_build_expands_venv_pip_options_and_nccl_home():
    spec = parse("job: {nodes: 1}\nsite: {venv: $SCRATCH/v, venv_build: {pip_options: "
                 "[--find-links, $SCRATCH/wheels], horovod: {nccl_home: $EBROOTNCCL}}}\n"
                 "program: [x]\n")
    text = render_venv_job(spec)
    assert "for name in SCRATCH; do" in text
    assert 'venv="${SCRATCH}/v"' in text and 'parent="${SCRATCH}"' in text
    assert '--find-links "${SCRATCH}/wheels"' in text
    assert '"HOROVOD_NCCL_HOME=${EBROOTNCCL}"' in text


@pytest.mark.parametrize("ref", ["nvcr.io/nvidia/pytorch:24.01", "localhost/img",
                                 "u@registry.example:5000/img"])
def test_apptainer_refuses_a_bare_registry_reference(ref):
    message = error(ONE + f"runtime: {{kind: apptainer, image: '{ref}'}}\n")
    assert message == (f"x.yaml: runtime.image: apptainer would read this registry reference "
                       f"as a file path; pull it on the login node (apptainer pull image.sif "
                       f"docker://{ref}) and name the .sif file, got {ref!r}")


@pytest.mark.parametrize("ref", ["img.sif", "sub.dir/img.sif", "./x.io/img", "$S/x.io/i"])
def test_apptainer_paths_that_look_like_hosts_are_paths(ref):
    assert parse(ONE + f"runtime: {{kind: apptainer, image: '{ref}'}}\n").runtime.image == ref


def cli_spec(tmp_path, runtime: str) -> str:
    path = tmp_path / "s.yaml"
    path.write_text(f"job: {{nodes: 1, output: o.out}}\nruntime: {runtime}\nprogram: [x]\n")
    return str(path)


@pytest.mark.parametrize("runtime, warns", [
    ("{kind: apptainer, image: img.sif}", "runtime.image 'img.sif' does not exist here"),
    ("{kind: apptainer, image: '$IMGS/img.sif'}",
     "runtime.image '$IMGS/img.sif' does not exist here (/imgs/img.sif"),
    ("{kind: enroot, image: '~/i.sqsh'}", "runtime.image '~/i.sqsh' does not exist here"),
    ("{kind: apptainer, image: 'docker://nvcr.io/nvidia/pytorch:24.01'}",
     "is pulled by every node at run time; compute nodes without internet"),
    ("{kind: pyxis, image: 'nvcr.io#nvidia/pytorch:24.01'}", None),
    ("{kind: apptainer, image: '$UNSET_HERE/img.sif'}", None),
])
def test_check_warns_about_the_image(tmp_path, monkeypatch, capsys, runtime, warns):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("IMGS", "/imgs")
    monkeypatch.delenv("UNSET_HERE", raising=False)
    assert main(["check", cli_spec(tmp_path, runtime)]) == 0
    err = capsys.readouterr().err
    if warns is None:
        assert err == ""
    else:
        assert warns in err and len(err.splitlines()) == 1


def test_check_is_quiet_when_the_image_exists(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "img.sif").write_text("")
    assert main(["check", cli_spec(tmp_path, "{kind: apptainer, image: img.sif}")]) == 0
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("where, warns", [("/tmp/x", True), ("/dev/shm", True),
                                          ("/tmpfoo", False), ("/p/project", False)])
def test_node_local_submit_directory(where, warns):
    lines = submit_warnings(parse(ONE), {}, where, submitting=True)
    assert bool(lines) == warns
    if warns:
        assert len(lines) == 1 and lines[0].startswith(f"warning: the submit directory {where} "
                                                       "is node-local")


def test_submit_says_so_in_one_line_and_still_submits(tmp_path, monkeypatch, capsys):
    if not str(tmp_path.resolve()).startswith("/tmp/"):
        pytest.skip("pytest's tmp_path is not under /tmp here")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("launcher.cli.sbatch", lambda s, e: "7")
    assert main(["submit", cli_spec(tmp_path, "bare")]) == 0
    out = capsys.readouterr()
    assert out.out == "7\n" and out.err.count("\n") == 1 and "is node-local" in out.err
