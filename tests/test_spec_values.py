"""Ring 1: the spec-value traps of issue 18 (item 2): Slurm times and numbers read as the
user wrote them, `$VAR`/`~` in paths and program arguments, image references, the
node-local submit directory and shadowing by files in the submit directory."""

import textwrap

import pytest

from launcher.jobscript import render_jobscript
from launcher.model import SpecError
from launcher.spec import parse_spec
from launcher.submitit import submitit_plan

pytestmark = pytest.mark.ring1

ONE = "job: {nodes: 1}\nprogram: [x]\n"


def parse(text: str):
    return parse_spec(textwrap.dedent(text), "x.yaml")


def error(text: str) -> str:
    with pytest.raises(SpecError) as info:
        parse(text)
    return str(info.value)


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
