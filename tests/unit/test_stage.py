"""Ring 1: runtime.stage (issue 36, item 5; docs/guide/runtimes.md "Staging the image to the
nodes"): what the spec accepts and the one line it refuses everything else with, what the
jobscript runs (the staging line in the runtime paragraph, every step on the staged copy, no
other change), and the per-node steps launcher/node/stage.sh run for real by bash in a
directory here: the job's private directory (0700, never one that exists), a copy of the
wrong size or owner or a directory not the job's stops the job with one line, what ended jobs
of the user left is removed, a running or newer job's never, a leftover that cannot be removed
does not fail the job (issue 43), and the user's jobs are listed by job id (squeue -o %A:
array tasks too)."""

from __future__ import annotations

import os
import re
import stat
import subprocess
from pathlib import Path

import pytest

from launcher import kit
from launcher.model import SpecError
from launcher.render.jobscript import render_jobscript
from launcher.spec import parse_spec

STAGE_SH = Path(kit.installed()) / "node" / "stage.sh"


def spec_text(kind: str = "apptainer", image: str = "image.sif", stage: str = "true",
              mode: str = "torchrun") -> str:
    return (f"job: {{nodes: 2}}\nruntime: {{kind: {kind}, image: {image}, stage: {stage}}}\n"
            f"launch: {{mode: {mode}}}\nprogram: [python3, train.py]\n")


def render(text: str) -> str:
    return render_jobscript(parse_spec(text, "x.yaml"))


def flat(text: str) -> str:
    """The script's words, its line breaks and continuations aside."""
    return " ".join(text.replace("\\\n", " ").split())


def test_stage_true_copies_to_tmp_and_every_step_runs_the_copy():
    text = render(spec_text())
    assert "jsc_stage image.sif /tmp || exit 1  # runtime.stage: a copy on every node " \
        "(sbcast), removed at the end\n" in text
    launch = text[text.index("# Launch:"):]
    assert '"${stage_image}" sh "${kit}/task/hook.sh"' in launch
    assert "image.sif" not in launch
    # Staging off: the same script without the staging line and with the image itself.
    plain = render(spec_text(stage="false"))
    assert "jsc_stage" not in plain and "stage_image" not in plain
    staged = text.replace("jsc_stage image.sif /tmp || exit 1  # runtime.stage: a copy on "
                          "every node (sbcast), removed at the end\n", "")
    assert flat(staged.replace('"${stage_image}"', "image.sif")) == flat(plain)


@pytest.mark.parametrize("stage,word", [
    ("{to: /local/scratch}", "/local/scratch"),
    ("{to: $LOCAL_SCRATCH}", '"${LOCAL_SCRATCH}"'),
    ("{}", "/tmp"),
])
def test_stage_to_names_the_node_local_directory(stage, word):
    assert f"jsc_stage image.sif {word} || exit 1" in render(spec_text(stage=stage))


@pytest.mark.parametrize("kind", ["enroot", "pyxis"])
def test_enroot_and_pyxis_stage_where_the_set_up_creates_the_container(kind):
    """The copy goes to the nodes that lack the container (jsc_stage_create asks them), the
    set-up gets it as its last argument; the launch itself is unchanged."""
    text = flat(render(spec_text(kind=kind, image="image.sqsh")))
    plain = flat(render(spec_text(kind=kind, image="image.sqsh", stage="false")))
    line = (f"jsc_stage_create {kind} /tmp || exit 1 # runtime.stage: a copy where the "
            "container is created (sbcast)")
    assert text.index("jsc_enroot_name image image.sqsh") < text.index(line)
    setup = '"${enroot_name}" 1' if kind == "pyxis" else '"${enroot_run}" "${enroot_jobs}"'
    assert f'{setup} "${{stage_image}}"' in text
    assert text.replace(line + " ", "").replace(' "${stage_image}"', "") == plain


def test_stage_in_the_srun_mode_and_the_doctor_steps_too():
    text = flat(render(spec_text(mode="srun, preflight: true")))
    assert '"${stage_image}" sh "${kit}/task/hook.sh" python3 train.py &' in text
    doctor = text[text.index("jsc_doctor"):text.index("# Launch:")]
    assert '"${stage_image}"' in doctor and "image.sif" not in doctor


@pytest.mark.parametrize("text,line", [
    (spec_text(stage="{to: scratch}"),
     "x.yaml: runtime.stage.to: must be an absolute node-local directory (or start with $VAR, "
     "expanded on the batch host), got 'scratch'"),
    (spec_text(stage="3"),
     "x.yaml: runtime.stage: must be true, false or {to: DIR} (a node-local directory, /tmp by "
     "default), got 3"),
    (spec_text(stage="{dir: /tmp}"),
     "x.yaml: runtime.stage: unknown key 'dir' (accepted: to)"),
    (spec_text(image="docker://nvcr.io/nvidia/pytorch:24.01"),
     "x.yaml: runtime.stage: copies an image file, but runtime.image is pulled from a registry "
     "(docker://nvcr.io/nvidia/pytorch:24.01): pull it once on the login node (apptainer pull "
     "image.sif ...) and name the .sif file"),
    (spec_text(kind="pyxis", image="nvcr.io#nvidia/pytorch:24.01-py3"),
     "x.yaml: runtime.stage: copies an image file, but pyxis imports this registry image "
     "itself (nvcr.io#nvidia/pytorch:24.01-py3): import it once (enroot import -o image.sqsh "
     "...) and name the .sqsh file"),
    ("job: {nodes: 2}\nruntime: {kind: bare, stage: true}\nlaunch: {mode: torchrun}\n"
     "program: [python3, train.py]\n",
     "x.yaml: runtime.stage: the bare runtime has no image to stage, got True"),
])
def test_bad_stage_values_are_refused_in_one_line(text, line):
    with pytest.raises(SpecError) as err:
        parse_spec(text, "x.yaml")
    assert str(err.value) == line


def run_check(copy: Path, size: int, jobs: str, job_id: str = "50", path: str = ""):
    env = {**os.environ, "SLURM_JOB_ID": job_id}
    if path:
        env["PATH"] = path
    return subprocess.run(["bash", str(STAGE_SH), "check", str(copy), str(size), jobs],
                          capture_output=True, text=True, env=env, timeout=30)


def private_copy(tmp_path: Path, job: str = "50", data: bytes = b"x" * 1000) -> Path:
    """This job's copy as jsc_stage makes it: in a directory stage.sh make made."""
    folder = tmp_path / f"torchrun-jsc-stage-{os.getuid()}-{job}-0123456789ab"
    made = subprocess.run(["bash", str(STAGE_SH), "make", str(folder)], capture_output=True,
                          text=True, timeout=30)
    assert made.returncode == 0, made.stderr
    (folder / "image.sif").write_bytes(data)
    return folder / "image.sif"


def test_make_creates_a_private_directory_and_never_takes_an_existing_one(tmp_path):
    copy = private_copy(tmp_path)
    assert stat.S_IMODE(copy.parent.stat().st_mode) == 0o700
    taken = tmp_path / "taken"
    taken.mkdir(mode=0o777)  # another user's, made first in a shared /tmp
    done = subprocess.run(["bash", str(STAGE_SH), "make", str(taken)], capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 1 and done.stderr.count("\n") >= 1
    assert f"runtime.stage: cannot make this job's directory {taken} on" in done.stderr


def test_the_node_check_removes_ended_jobs_copies_only(tmp_path):
    uid = os.getuid()
    copy = private_copy(tmp_path)
    ended = tmp_path / f"torchrun-jsc-stage-{uid}-7-00aa00aa00aa"  # a directory, as now made
    ended.mkdir()
    (ended / "image.sif").write_bytes(b"y")
    old_style = tmp_path / f"torchrun-jsc-stage-{uid}-6-image.sif"  # a copy older kits left
    running = tmp_path / f"torchrun-jsc-stage-{uid}-8-other.sif"
    newer = tmp_path / f"torchrun-jsc-stage-{uid}-51-image.sif"
    others = tmp_path / f"torchrun-jsc-stage-{uid + 1}-7-image.sif"
    for path in (old_style, running, newer, others):
        path.write_bytes(b"y")
    done = run_check(copy, 1000, "8\n50")
    assert done.returncode == 0, done.stderr
    host = os.uname().nodename
    assert sorted(done.stdout.splitlines()) == [
        f"runtime.stage: removed {old_style} on {host} (job 6 has ended)",
        f"runtime.stage: removed {ended} on {host} (job 7 has ended)"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        p.name for p in (copy.parent, running, newer, others))
    # squeue could not be asked: nothing is removed.
    assert run_check(copy, 1000, "unknown").stdout == "" and running.exists()


def test_a_leftover_that_cannot_be_removed_does_not_fail_the_job(tmp_path):
    """The exit status is the copy's check, not the last rm's."""
    copy = private_copy(tmp_path)
    (tmp_path / f"torchrun-jsc-stage-{os.getuid()}-7-image.sif").write_bytes(b"y")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "rm").write_text("#!/bin/sh\necho 'rm: Operation not permitted' >&2\nexit 1\n")
    (bin_dir / "rm").chmod(0o755)
    done = run_check(copy, 1000, "50", path=f"{bin_dir}:{os.environ['PATH']}")
    assert done.returncode == 0, done.stderr
    assert "could not remove" in done.stderr and "a later job tries again" in done.stderr


def test_a_truncated_or_missing_copy_stops_the_job_in_one_line(tmp_path):
    uid = os.getuid()
    copy = private_copy(tmp_path, data=b"x" * 10)
    done = run_check(copy, 1000, "50")
    host = os.uname().nodename
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr == (f"runtime.stage: the copy {copy} on {host} is not the image (size "
                           f"10 of 1000 bytes, owner {uid}, uid {uid}): the job stops; is its "
                           "directory full or not node-local?\n")
    copy.unlink()
    done = run_check(copy, 1000, "50")
    assert done.returncode == 1 and "(size none of 1000 bytes, owner none" in done.stderr
    # A link (someone's file in a shared /tmp) is never run.
    target = tmp_path / "elsewhere"
    target.write_bytes(b"x" * 1000)
    copy.symlink_to(target)
    assert run_check(copy, 1000, "50").returncode == 1


def test_a_directory_not_the_jobs_own_stops_the_job(tmp_path):
    copy = private_copy(tmp_path)
    copy.parent.chmod(0o755)  # readable by others: not what make made
    done = run_check(copy, 1000, "50")
    assert done.returncode == 1 and done.stderr == (
        f"runtime.stage: the directory {copy.parent} on {os.uname().nodename} is not this "
        f"job's (owner:mode {os.getuid()}:755, uid {os.getuid()}): the job stops\n")


def test_the_users_jobs_are_listed_by_job_id_arrays_included(tmp_path):
    """squeue -o %A: an array task's own job id, which its staged copy is named by (%i would
    print BASE_INDEX, and a running array task's copy would be removed as ended)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "squeue").write_text('#!/bin/sh\ncase "$*" in *%A*) echo 4243 ;; '
                                    '*) echo 4242_3 ;; esac\n')
    (bin_dir / "squeue").chmod(0o755)
    job_sh = Path(kit.installed()) / "node" / "job.sh"
    fn = re.search(r"^jsc_user_jobs\(\) \{.*?^\}", job_sh.read_text(), re.S | re.M)[0]
    done = subprocess.run(["bash", "-c", fn + "\njsc_user_jobs"], capture_output=True, text=True,
                          env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"},
                          timeout=30)
    assert done.stdout == "4243\n", done.stderr
