"""Ring 1: `jsc-compose dockerfile` (launcher/dockerfile/, issue 44): a corpus of the Dockerfile
shapes ML projects use (tests/helpers/dockerfiles/: pip, conda/mamba, multi-stage with COPY
--from, ENTRYPOINT-only, CMD-only, ARG-driven base, WORKDIR-relative paths, the instructions
Apptainer has no equivalent for) converted to exact definitions and notes (goldens
NAME.def/NAME.notes; `REGENERATE_GOLDENS=1` rewrites them, a missing one fails); each
spython 0.3.14 defect the converter works around, pinned, so that an upgrade that changes one
is noticed; Docker's rules checked by running the generated shell (the runscript's ENTRYPOINT
+ CMD with hostile arguments, COPY's directory and trailing-slash rules, the environment
file's quoting); and every refusal as one line (the CLI: exit 2)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Dict, List

import pytest

from launcher.cli import main
from launcher.dockerfile import DockerfileError, convert
from launcher.dockerfile.context import FakeContext
from launcher.dockerfile.render import COPY_FN
from launcher.dockerfile.runscript import runscript

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "tests" / "helpers" / "dockerfiles"
CASES = sorted(p.name for p in CORPUS.iterdir() if p.is_dir())
REGENERATE = os.environ.get("REGENERATE_GOLDENS") == "1"


def listing(case: str) -> Dict[str, str]:
    root = CORPUS / case
    return {str(p.relative_to(root)): "file" for p in root.rglob("*") if p.is_file()}


def golden(case: str) -> tuple:
    done = convert((CORPUS / case / "Dockerfile").read_text(),
                   FakeContext(f"/ctx/{case}", listing(case)),
                   header=[f"golden of tests/helpers/dockerfiles/{case}"])
    return done.text, "".join(f"{line}\n" for line in done.notes)


def test_the_corpus_has_the_shapes_issue_44_names():
    assert set(CASES) == {"pip", "conda", "multistage", "entrypoint-only", "cmd-only",
                          "arg-base", "workdir", "unsupported"}


@pytest.mark.parametrize("case", CASES)
def test_corpus_converts_to_the_golden_definition_and_notes(case):
    text, notes = golden(case)
    for suffix, got in ((".def", text), (".notes", notes)):
        path = CORPUS / f"{case}{suffix}"
        if REGENERATE:
            path.write_text(got)
        assert path.exists(), f"{path} missing: REGENERATE_GOLDENS=1 writes it (then read it)"
        assert got == path.read_text(), f"{path} differs (REGENERATE_GOLDENS=1 rewrites it)"


@pytest.mark.parametrize("case", CASES)
def test_no_line_of_a_section_looks_like_a_section_header(case):
    """Apptainer takes any line whose first non-blank is '%' as a section header."""
    text, _ = golden(case)
    known = {"%files", "%post", "%labels", "%runscript", "%environment"}
    for line in text.splitlines():
        if line.lstrip().startswith("%"):
            assert line.split(" from ")[0] in known and not line.startswith(" "), line
    assert "{{" not in text


def convert_text(text: str, files: Dict[str, str] = None, **kw) -> tuple:
    done = convert(text, FakeContext("/ctx", files or {}), **kw)
    return done.text, list(done.notes)


# --- spython 0.3.14's defects, pinned -----------------------------------------------------------
TWO_STAGES = """\
FROM python:3.11-slim AS builder
RUN pip wheel -w /wheels torch
FROM nvcr.io/nvidia/pytorch:25.12-py3
COPY --from=builder /wheels /wheels
USER 1000
HEALTHCHECK CMD curl -f http://localhost/ || exit 1
CMD ["python3"]
"""


def spython_recipe(tmp_path: Path, text: str) -> tuple:
    from spython.main.parse.parsers.docker import DockerParser
    from spython.main.parse.writers.singularity import SingularityWriter

    path = tmp_path / "Dockerfile"
    path.write_text(text)
    recipe = DockerParser(str(path)).parse()
    return recipe, SingularityWriter(recipe).convert()


def test_spython_is_the_pinned_version():
    from importlib.metadata import version

    assert version("spython") == "0.3.14", "spython changed: rerun this file and read the pins"


def test_spython_merges_an_unnamed_final_stage_into_the_builder(tmp_path):
    recipe, text = spython_recipe(tmp_path, TWO_STAGES)
    assert list(recipe) == ["builder"]  # one stage, named after the first ...
    assert recipe["builder"].fromHeader == "nvcr.io/nvidia/pytorch:25.12-py3"  # ... final base
    assert "pip wheel -w /wheels torch" in recipe["builder"].install  # builder RUN in final
    assert "%files from builder" in text and text.count("Stage:") == 1  # from a gone stage
    ours, _ = convert_text(TWO_STAGES)
    assert ours.count("Bootstrap: docker") == 2 and "Stage: builder" in ours
    assert "Stage: stage-1" in ours and "%files from builder" in ours
    final = ours.split("Stage: stage-1")[1]
    assert "pip wheel" not in final


def test_spython_turns_user_into_su_and_healthcheck_into_a_test(tmp_path):
    _, text = spython_recipe(tmp_path, TWO_STAGES)
    assert "su -  1000 # USER 1000" in text
    assert "%test\nCMD curl -f http://localhost/ || exit 1" in text
    assert 'exec /bin/bash python3 "$@"' in text  # CMD ["python3"] run as a bash script
    ours, notes = convert_text(TWO_STAGES)
    assert 'set -- python3; fi\n' in ours and 'exec "$@"' in ours
    assert "su " not in ours and "%test" not in ours and "curl" not in ours
    assert [n.split(":")[1] for n in notes if "not carried over" in n] == ["5", "6"]


def test_spython_keeps_quotes_in_env_values_and_exits_without_from(tmp_path):
    from spython.main.parse.parsers.docker import DockerParser
    from spython.main.parse.recipe import Recipe
    from spython.main.parse.writers.singularity import SingularityWriter

    assert DockerParser(None, load=False).parse_env(['A="1 2"']) == ['A="1 2"']
    ours, _ = convert_text('FROM x\nENV A="1 2"\n')
    assert 'export A="1 2"' in ours  # the shell's quotes, the value without them
    with pytest.raises(SystemExit):  # a library calling sys.exit: never on our path
        SingularityWriter({"x": Recipe()}).convert()


def test_spython_reads_a_lone_stage_s_cmd_and_entrypoint_right():
    from launcher.dockerfile.lexer import read_instructions
    from launcher.dockerfile.spython import stage_values

    got = stage_values(read_instructions('ENTRYPOINT ["a", "b c"]\nCMD x "$Y"\nEXPOSE 1 2\n'))
    assert (got.entrypoint, got.cmd, got.ports) == (["a", "b c"], 'x "$Y"', ("1 2",))


# --- Docker's rules, run by sh ----------------------------------------------------------------
HOSTILE = ["a b", "it's", "$(touch pwned)", "semi;colon", "new\nline", "ünï"]


def run_runscript(lines: List[str], args: List[str], tmp_path: Path) -> List[str]:
    """Run the runscript with a fake 'prog' that prints its argv, one per line (NUL-safe)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "prog").write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\0" "$a"; done\n')
    (bin_dir / "prog").chmod(0o755)
    script = tmp_path / "runscript"
    script.write_text("\n".join(lines).replace("cd /w", f"cd {tmp_path}") + "\n")
    done = subprocess.run(["/bin/sh", str(script), *args], capture_output=True, cwd=tmp_path,
                          env={"PATH": f"{bin_dir}:/usr/bin:/bin"}, timeout=30, check=True)
    assert not (tmp_path / "pwned").exists()
    return done.stdout.decode().split("\0")[:-1]


@pytest.mark.parametrize("entry,cmd,args,expected", [
    (["prog", "e"], ["c1", "c 2"], [], ["e", "c1", "c 2"]),          # exec + exec: CMD
    (["prog", "e"], ["c1"], HOSTILE, ["e", *HOSTILE]),                 # args replace CMD
    (["prog"], None, HOSTILE, HOSTILE),                                # ENTRYPOINT only
    (None, ["prog", "x y"], [], ["x y"]),                              # CMD only
    (None, ["prog", "x"], ["prog", *HOSTILE], HOSTILE),                # args replace CMD
    (None, "prog 'a b' $HOME", [], ["a b", "/nohome"]),                # shell-form CMD
    ("prog shell-form", ["ignored"], ["ignored too"], ["shell-form"]),  # shell ENTRYPOINT
    (["prog", "e"], "c 'd e'", [], ["e", "-c", "c 'd e'"]),            # exec E + shell CMD
])
def test_runscript_keeps_docker_s_entrypoint_and_cmd_rules(entry, cmd, args, expected,
                                                           tmp_path):
    lines = runscript(entry, cmd, ["/bin/sh", "-c"], "/w")
    if entry == ["prog", "e"] and isinstance(cmd, str):
        expected = ["e", "/bin/sh", "-c", cmd]  # Docker: ["/bin/sh", "-c", CMD] after it
    os.environ.setdefault("HOME", "/nohome")
    got = run_runscript([ln.replace("$HOME", "/nohome") for ln in lines], args, tmp_path)
    assert got == expected


def test_cmd_alone_runs_under_the_base_image_s_entrypoint(tmp_path):
    """Docker keeps the base image's ENTRYPOINT under a Dockerfile's CMD: the runscript reads
    it as the build recorded it from Apptainer's OCI runscript (OCI_ENTRYPOINT='...')."""
    text, _ = convert_text('FROM x\nCMD ["c1"]\n')
    post = [ln.strip() for ln in text.split("%post\n")[1].splitlines()]
    start = post.index("OCI_ENTRYPOINT=")
    recorded = tmp_path / "recorded"
    oci = tmp_path / "oci-runscript"
    oci.write_text("#!/bin/sh\nOCI_ENTRYPOINT='\"prog\" \"base entry\"'\nOCI_CMD='\"x\"'\n")
    record = "\n".join(post[start:start + 3]).replace("/.singularity.d/runscript", str(oci))
    record = record.replace("/.singularity.d/dockerfile-base-entrypoint", str(recorded))
    subprocess.run(["/bin/sh", "-c", record], check=True, timeout=30)
    lines = [ln.replace("/.singularity.d/dockerfile-base-entrypoint", str(recorded))
             for ln in runscript(None, ["c1"], ["/bin/sh", "-c"], "/", base_entry=True)]
    assert run_runscript(lines, [], tmp_path) == ["base entry", "c1"]
    assert run_runscript(lines, HOSTILE, tmp_path) == ["base entry", *HOSTILE]
    recorded.write_text("\n")  # a base without ENTRYPOINT
    assert run_runscript(lines, ["prog", "a b"], tmp_path) == ["a b"]


def test_runscript_starts_in_workdir(tmp_path):
    lines = runscript(None, ["pwd"], ["/bin/sh", "-c"], "/w")
    script = tmp_path / "r"
    script.write_text("\n".join(lines).replace("cd /w", f"cd {tmp_path}") + "\n")
    out = subprocess.run(["/bin/sh", str(script)], capture_output=True, text=True, cwd="/",
                         timeout=30, check=True).stdout
    assert out.strip() == str(tmp_path)


def copy_tree(tmp_path: Path, calls: List[str]) -> Path:
    (tmp_path / "s" / "dir" / "sub").mkdir(parents=True)
    (tmp_path / "s" / "dir" / "sub" / "f").write_text("f")
    (tmp_path / "s" / "a.txt").write_text("a")
    (tmp_path / "s" / "b.txt").write_text("b")
    script = COPY_FN + "\nset -e\ncd " + str(tmp_path) + "\n" + "\n".join(calls) + "\n"
    subprocess.run(["/bin/sh", "-c", script], check=True, timeout=30)
    return tmp_path


def files_under(root: Path) -> List[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


@pytest.mark.parametrize("call,expected", [
    ("_copy '' d/ s/dir", ["d/sub/f"]),                 # a directory's contents
    ("_copy '' d s/dir", ["d/sub/f"]),
    ("_copy '' d/x.txt s/a.txt", ["d/x.txt"]),         # a file to a file name
    ("_copy '' d/ s/a.txt", ["d/a.txt"]),              # into DEST/
    ("_copy '' d s/a.txt s/b.txt", ["d/a.txt", "d/b.txt"]),  # several: DEST is a directory
    ("mkdir d && _copy '' d s/a.txt", ["d/a.txt"]),    # into an existing directory
])
def test_copy_follows_docker_s_rules(call, expected, tmp_path):
    root = copy_tree(tmp_path, [call])
    assert files_under(root / "d") == [e[2:] for e in expected]


def test_copy_chmod_applies_to_what_was_copied(tmp_path):
    root = copy_tree(tmp_path, ["_copy 750 d/ s/a.txt"])
    assert oct((root / "d" / "a.txt").stat().st_mode & 0o777) == "0o750"


def test_environment_file_round_trips_hostile_values(tmp_path):
    """The final stage's env script quotes what the build resolved: sourcing it gives the
    value back byte for byte."""
    text, _ = convert_text("FROM x\nENV V=placeholder\n")
    tail = [line[4:] for line in text.split("%post\n")[1].splitlines() if "_q" in line]
    value = "a 'b' \"c\" $d `e` \\f"
    target = tmp_path / "env.sh"
    script = "\n".join(tail).replace("/.singularity.d/env/91-dockerfile.sh", str(target))
    subprocess.run(["/bin/sh", "-c", script], env={"V": value, "PATH": "/usr/bin:/bin"},
                   check=True, timeout=30)
    out = subprocess.run(["/bin/sh", "-c", f". {target}; printf %s \"$V\""],
                         capture_output=True, text=True, check=True, timeout=30).stdout
    assert out == value


# --- Semantics, exact lines -----------------------------------------------------------------
def post_lines(text: str) -> List[str]:
    return [ln.strip() for ln in text.split("%post\n")[-1].split("\n\n")[0].splitlines()]


def test_args_defaults_overrides_and_the_unused_build_arg():
    text, notes = convert_text("ARG BASE=python:3.11\nFROM $BASE\nARG A=1\nARG B\nARG C=x\n"
                               "RUN echo $A\n", build_args={"A": "2", "B": "b b", "Z": "9"})
    assert "From: python:3.11" in text
    assert ["export A=2", "export B='b b'", "export C=x"] == [
        ln for ln in post_lines(text) if ln.startswith("export ")][:3]
    assert notes[-1].startswith("--build-arg Z: no ARG")


def test_global_arg_reaches_a_stage_only_when_redeclared():
    text, _ = convert_text("ARG V=1\nFROM x AS a\nRUN echo\nFROM y\nARG V\n"
                           "COPY --from=a /f /f\n")
    first, second = text.split("Stage: stage-1")
    assert "Stage: a" in first and "export V" not in first
    assert "export V=1" in second


def test_a_stage_the_final_one_does_not_need_is_left_out():
    text, _ = convert_text("FROM x AS unused\nRUN never\nFROM y\nRUN built\n")
    assert "never" not in text and "Stage:" not in text and "From: y" in text


def test_env_forms_and_variables():
    text, _ = convert_text('FROM x\nARG R=/opt\nENV A $R/a b\nENV B="$A" C=${HOME}/c '
                           'D=\'$lit\'\nENV PATH=$R/bin:$PATH\n')
    exports = [ln for ln in post_lines(text) if ln.startswith("export ")]
    assert exports == ["export R=/opt", 'export A="/opt/a b"', 'export B="/opt/a b"',
                       'export C="${HOME}/c"', 'export D="\\$lit"',
                       'export PATH="/opt/bin:${PATH}"']


def test_workdir_relative_and_unknown_variable():
    text, _ = convert_text("FROM x\nWORKDIR a\nWORKDIR b/../c\nENV W=/w\nWORKDIR $W/d\n")
    assert [ln for ln in post_lines(text) if ln.startswith("mkdir")] == [
        "mkdir -p /a && cd /a", "mkdir -p /a/c && cd /a/c", "mkdir -p /w/d && cd /w/d"]
    with pytest.raises(DockerfileError, match=r"Dockerfile:2: WORKDIR uses \$\{HOME\}"):
        convert_text("FROM x\nWORKDIR $HOME/app\n")


def test_stage_from_a_stage_runs_its_steps_again_without_its_args():
    text, _ = convert_text("FROM x AS base\nARG A=1\nENV E=e\nRUN one\n"
                           "FROM base AS final\nRUN two\n")
    assert text.count("Bootstrap: docker\nFrom: x") == 1  # base is not needed on its own
    lines = post_lines(text)
    assert lines.index("unset A") < lines.index("/bin/sh -c two")
    assert "/bin/sh -c one" in lines


def test_copy_from_a_stage_number_and_an_image():
    text, _ = convert_text("FROM a\nRUN x\nFROM b\nCOPY --from=0 /o /o\n"
                           "COPY --from=busybox:1 /bin/busybox /bin/\n")
    assert "%files from stage-0\n    /o /.dockerfile/copy/4/1/o" in text
    assert "Bootstrap: docker\nFrom: busybox:1\nStage: image-5" in text


def test_from_local_sources():
    for value, header in [("/s/base.sif", "Bootstrap: localimage\nFrom: /s/base.sif"),
                          ("docker-archive:/s/b.tar", "Bootstrap: docker-archive\nFrom: /s/b.tar"),
                          ("oci-archive:/s/b.tar", "Bootstrap: oci-archive\nFrom: /s/b.tar")]:
        text, _ = convert_text("FROM lab/base:1\n", from_local={"lab/base:1": value})
        assert header in text
    with pytest.raises(DockerfileError, match="--from-local lab/base:1: expected PATH.sif"):
        convert_text("FROM lab/base:1\n", from_local={"lab/base:1": "/s/b.tar"})


def test_target_platform_args_follow_arch():
    text, _ = convert_text("FROM x\nARG TARGETARCH\nARG TARGETPLATFORM\n", arch="arm64")
    assert "export TARGETARCH=arm64" in text and "export TARGETPLATFORM=linux/arm64/v8" in text


def test_run_forms_and_flags():
    text, _ = convert_text('FROM x\nSHELL ["/bin/bash", "-c"]\nRUN ["pip", "install", "a b"]\n'
                           "RUN --mount=type=cache,target=/root/.cache echo $X\n")
    assert "pip install 'a b'  # Dockerfile:3: RUN" in text
    assert "/bin/bash -c 'echo $X'" in text
    with pytest.raises(DockerfileError, match="Dockerfile:2: RUN --mount=type=secret"):
        convert_text("FROM x\nRUN --mount=type=secret,id=t cat /run/secrets/t\n")


@pytest.mark.parametrize("text,files,message", [
    ("FROM x\nCOPY missing.txt /\n", {}, "Dockerfile:2: COPY missing.txt: no such file or "
     "directory in the build context /ctx"),
    ("FROM x\nCOPY ../up /\n", {}, "Dockerfile:2: COPY ../up: outside the build context"),
    ("FROM x\nCOPY *.py /\n", {"a.txt": "file"}, "Dockerfile:2: COPY \\*.py: no file"),
    ("FROM x\nADD https://e.org/f.tgz /\n", {}, "Dockerfile:2: ADD https://e.org/f.tgz: URLs"),
    ("FROM x\nCOPY --exclude=*.pyc . /\n", {}, "Dockerfile:2: COPY --exclude=\\*.pyc: not"),
    ("FROM x\nRUN <<EOF\necho hi\nEOF\n", {}, "Dockerfile:2: RUN with a heredoc"),
    ("FROM x\nRUN docker inspect -f '{{.Id}}' y\n", {}, "Dockerfile:2: RUN: '{{' is"),
    ("FROM x\nRUN printf 'a\\\n%s' b\n", {}, "Dockerfile:2: RUN: a continuation line"),
    ("FROM x\nFROBNICATE\n", {}, "Dockerfile:2: FROBNICATE: unknown instruction"),
    ("RUN x\nFROM y\n", {}, "Dockerfile:1: RUN: before the first FROM only ARG"),
    ("# just a comment\n", {}, "Dockerfile: no FROM instruction"),
    ("# escape=`\nFROM x\n", {}, "Dockerfile:1: escape=`: only the backslash"),
    ("FROM x\nENV A=${B#pre}\n", {}, "Dockerfile:2: ENV: unsupported substitution"),
    ("FROM ${IMG%:*}\n", {}, "Dockerfile:1: FROM: unsupported substitution"),
    ("FROM x\nCOPY --from=0 /a /b\n", {}, "Dockerfile:2: COPY --from=0: no stage 0 before"),
    ("FROM x\nCOPY [\"a b\", \"/d\"]\n", {"a b": "file"}, "Apptainer's %files cannot name"),
])
def test_refusals_are_one_line_with_the_place(text, files, message):
    with pytest.raises(DockerfileError) as err:
        convert_text(text, files)
    assert "\n" not in str(err.value)
    assert __import__("re").search(message, str(err.value)), str(err.value)


def test_tabs_lowercase_keywords_and_continuations():
    text, _ = convert_text("from\tx\nrun\techo a \\\n  # dropped\n  b\n")
    assert "From: x" in text and "/bin/sh -c 'echo a \\\n  b'" in text


def test_relative_copy_before_any_workdir_is_named():
    _, notes = convert_text("FROM x\nCOPY a.txt .\n", {"a.txt": "file"})
    assert notes == ["Dockerfile:2: COPY to .: relative to /, as no WORKDIR came before it "
                     "(Docker: the base image's WORKDIR, which is not known here)"]


def test_dockerignore_and_chown_are_named():
    done = convert("FROM x\nCOPY --chown=1:1 . /a\n", FakeContext("/ctx", {}, dockerignore=True))
    assert any(".dockerignore is not read" in n for n in done.notes)
    assert any("--chown=1:1: not carried over" in n for n in done.notes)


# --- The CLI edge ----------------------------------------------------------------------------
def test_cli_writes_the_definition_and_prints_notes(tmp_path, capsys):
    (tmp_path / "Dockerfile").write_text("FROM x\nCOPY a.txt /a\nEXPOSE 1\nCMD [\"true\"]\n")
    (tmp_path / "a.txt").write_text("a")
    out = tmp_path / "image.def"
    assert main(["dockerfile", str(tmp_path / "Dockerfile"), "-o", str(out), "--arch",
                 "x86_64"]) == 0
    assert f"    {tmp_path}/a.txt /.dockerfile/copy/2/1/a.txt" in out.read_text()
    assert capsys.readouterr().err.startswith("Dockerfile:3: EXPOSE 1: not carried over")


@pytest.mark.parametrize("args,message", [
    (["nope/Dockerfile"], "nope/Dockerfile: no such file"),
    (["{df}", "--build-arg", "X"], "--build-arg: expected NAME=VALUE, got 'X'"),
    (["{df}", "--arch", "sparc"], "--arch: amd64 or arm64"),
    (["{df}", "--from-local", "x=y.tar"], "--from-local x: expected PATH.sif"),
    (["{df}", "--context", "/nonexistent"], "--context: not a directory"),
])
def test_cli_bad_input_is_one_line_exit_2(args, message, tmp_path, capsys):
    df = tmp_path / "Dockerfile"
    df.write_text("FROM x\n")
    assert main(["dockerfile", *(a.format(df=df) for a in args)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
