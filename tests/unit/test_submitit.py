"""Ring 1: launcher.submitit, submitit executors from job specs: the executor's parameters
and python command from a spec (launcher.submitit_plan), one-line errors for what submitit
cannot run."""

from __future__ import annotations

import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from launcher import __version__, kit
from launcher.model import SpecError
from launcher.spec import parse_spec
from launcher.shell import render_statement
from launcher.submitit import minutes, submitit_plan

ROOT = Path(__file__).resolve().parents[2]
FOLDER = "/shared/sub mit/%j"


def spec(runtime: str = "runtime: bare", job: str = "", site: str = "site: jsc"):
    """A 2 x 2 srun spec; ``job``: extra lines of the job mapping (indented two spaces)."""
    text = ('job:\n  nodes: 2\n  time: "00:10:00"\n  partition: batch\n' + job.rstrip("\n")
            + "\n" + f"{site}\n{runtime}\n"
            + "launch:\n  mode: srun\n  procs_per_node: 2\nprogram: [python3, x.py]\n")
    return parse_spec(text.replace("\n\n", "\n"), "s.yaml")


# --- Ring 1 ---------------------------------------------------------------------------------

@pytest.mark.parametrize("text,expected", [
    ("30", 30), ("0:5", 1), ("10:30", 11), ("00:10:00", 10), ("1:00:01", 61), ("1-2", 1560),
    ("1-02:30", 1590), ("1-00:00:01", 1441)])
def test_slurm_times_become_whole_minutes_rounded_up(text, expected):
    assert minutes(text) == expected


def test_parameters_come_from_the_job_and_launch_sections():
    s = spec(job="  account: proj1\n  cpus_per_task: 3\n  gpus_per_node: 4\n"
                 "  sbatch: {mem: 10G, reservation: r 1, hint: true}")
    p = submitit_plan(s, FOLDER).parameters
    assert {k: v for k, v in p.items() if k != "setup"} == {
        "job_name": "s", "nodes": 2, "ntasks_per_node": 2, "time": 10, "partition": "batch",
        "account": "proj1", "cpus_per_task": 3, "gpus_per_node": 4,
        # cpus_per_task set: no --exclusive (launcher.features.placement's rule, as in jobscripts)
        "additional_parameters": {"mem": "10G", "reservation": "r 1", "hint": True},
        # 2 tasks per node of a GPU job: socket by socket, as srun mode's step
        "srun_args": ["--distribution=block:block"]}
    one = spec(job="  gpus_per_node: 4\n  sbatch: {distribution: 'cyclic:cyclic'}")
    assert "srun_args" not in submitit_plan(one, FOLDER).parameters  # the user's own


def test_whole_nodes_by_default_and_no_time_when_the_spec_has_none():
    s = parse_spec("job: {nodes: 3}\nprogram: [x]\n", "t.yaml")
    p = submitit_plan(s, FOLDER).parameters
    assert p["exclusive"] is True and p["nodes"] == 3 and p["ntasks_per_node"] == 1
    assert "time" not in p and "partition" not in p and p["job_name"] == "t"


TASK = 'bash "${kit}/node/task.sh" srun'  # srun mode's task script (launcher/node/task.sh)


def test_bare_runs_this_python_or_the_venvs_or_the_one_given():
    assert submitit_plan(spec(), FOLDER).python == f"{TASK} {shlex.quote(sys.executable)}"
    assert submitit_plan(spec(), FOLDER, python="/opt/py 3/bin/python").python == \
        f"{TASK} /opt/py 3/bin/python"  # as given: submitit's python is a shell command
    venv = submitit_plan(spec(site="site: {profile: jsc, venv: .venv}"), FOLDER)
    assert venv.python == f"{TASK} python3"
    assert "source .venv/bin/activate" in venv.setup


def test_python_is_only_for_bare_without_venv():
    with pytest.raises(ValueError) as err:
        submitit_plan(spec("runtime: {kind: apptainer, image: i.sif}"), FOLDER, python="/p")
    assert str(err.value) == ("python= is for the bare runtime without site.venv; this spec runs "
                              "python3 from the apptainer image")


def test_apptainer_binds_the_folder_at_its_path_and_nv_follows_gpus():
    rt = "runtime: {kind: apptainer, image: my img.sif, binds: [/data]}"
    plain = submitit_plan(spec(rt), FOLDER).python
    assert plain == (f'{TASK} apptainer exec --bind "${{kit}}:${{kit}}:ro" --bind /data:/data '
                     "--bind '/shared/sub mit:/shared/sub mit' --bind \"${PWD}\" 'my img.sif' python3")
    gpus = submitit_plan(spec(rt, job="  gpus_per_node: 4"), FOLDER).python
    assert "apptainer exec --nv --bind" in gpus
    assert "--bind /f/x:/f/x " in submitit_plan(spec(rt), "/f/x").python  # no %j: the folder


@pytest.mark.parametrize("site,addr", [("site: jsc", 'rdzv_host="${first_node}${host_suffix}"'),
                                       ("site: generic", 'jsc_endpoint "$first_node"')])
def test_master_is_the_first_nodes_inter_node_name(site, addr):
    setup = submitit_plan(spec(site=site), FOLDER).setup
    assert addr in setup
    # jsc: the suffix picked per system on the first node (launcher.features.site), before use
    picks = [i for i, line in enumerate(setup) if line.startswith("jsc_pick_host_suffix ")]
    assert picks == ([setup.index(addr) - 1] if site == "site: jsc" else [])
    assert setup.index("jsc_first_node || exit 1") < setup.index(addr)  # launcher/node/job.sh
    assert setup.index(addr) + 1 == setup.index('jsc_rdzv_port "${rdzv_host}" 29500 1000 100')
    # The jobscript's own preamble: the same rendezvous lines, then env:// from them.
    at = setup.index('export MASTER_ADDR="$rdzv_host" MASTER_PORT="$rdzv_port"')
    assert at > setup.index(addr)


def test_port_site_and_env_sections_reach_the_setup():
    s = parse_spec(textwrap.dedent("""\
        job: {nodes: 2}
        site: {profile: jsc, socket_ifname: ib0, env: {NCCL_IB_GID_INDEX: "3"}}
        env: {set: {HOSTILE: "a b 'c' $$x"}}
        launch: {mode: srun, procs_per_node: 2, rdzv_port: 29400}
        program: [x]
        """), "e.yaml")
    setup = submitit_plan(s, FOLDER).setup
    assert "rdzv_port=29400" in setup
    assert "export GLOO_SOCKET_IFNAME=ib0" in setup and "export NCCL_SOCKET_IFNAME==ib0" in setup
    assert "export NCCL_IB_GID_INDEX=3" in setup
    assert "export HOSTILE='a b '\"'\"'c'\"'\"' $x'" in setup
    # The task script is the kit's file, called by path: no script text in the set-up.
    assert not any("bash -c" in line or "python3 -c" in line or "python3 -I -c" in line
                   for line in setup)


def test_setup_names_the_kit_first_and_checks_its_version():
    """The set-up's first lines are the jobscript's: the kit's path (this kit's by default,
    absolute: submitit's job starts wherever submitit runs it), its functions, this version."""
    setup = submitit_plan(spec(), FOLDER).setup
    assert setup[:4] == tuple(render_statement(s) for s in kit.lines(str(kit.installed())))
    assert setup[1] == f"kit={shlex.quote(str(kit.installed()))}"
    assert setup[3] == f'source "$kit/node/job.sh" {__version__} || exit 1'
    other = submitit_plan(spec(), FOLDER, kit_dir="/p/kit dir/launcher").setup
    assert other[1] == "kit='/p/kit dir/launcher'"


def test_pyxis_is_refused_in_one_line_saying_why():
    with pytest.raises(SpecError) as err:
        submitit_plan(spec("runtime: {kind: pyxis, image: i.sqsh}"), FOLDER)
    text = str(err.value)
    assert text.startswith("s.yaml: runtime.kind: submitit cannot use pyxis: pyxis takes the "
                           "container through srun flags, and submitit writes its srun flags "
                           "shell-quoted")
    assert "\n" not in text and text.endswith(", got 'pyxis'")


def test_enroot_creates_per_node_then_starts_python_with_the_folder_mounted():
    plan = submitit_plan(spec("runtime: {kind: enroot, image: i.sqsh}"), "/f/%j")
    assert plan.python == (f'{TASK} bash "${{kit}}/node/enroot-start.sh" "${{enroot_names}}" '
                           '--mount "${kit}:${kit}:none:x-create=auto,rbind,ro" '
                           '--mount /f:/f --mount "${PWD}:${PWD}" "${enroot_run}" '
                           'env "--chdir=${PWD}" python3')
    setup = "\n".join(plan.setup)
    flat = " ".join(setup.replace("\\\n", " ").split())  # the line breaks are the renderer's
    assert 'nnodes="$SLURM_JOB_NUM_NODES"' in plan.setup
    assert ('srun --kill-on-bad-exit=1 "--nodes=${nnodes}" "--ntasks=${nnodes}" '
            '--ntasks-per-node=1 "--cpus-per-task=${cpus_per_node}" bash '
            '"${kit}/node/enroot-setup.sh" "${enroot_image}" "${enroot_name}" 1 "${enroot_run}" '
            '"${enroot_jobs}" || exit 1') in flat
    # Enroot forwards by name: submitit's own variables are among the names.
    (names,) = [line for line in plan.setup if line.startswith("enroot_names=")]
    assert "SUBMITIT_*" in shlex.split(names.split("=", 1)[1])[0].split()


def test_requeue_is_submitits_own():
    s = spec(job="  requeue: {before: 60}")
    with pytest.raises(SpecError, match=r"^s\.yaml: job\.requeue: submitit requeues by itself"):
        submitit_plan(s, FOLDER)


@pytest.mark.parametrize("folder,message", [
    ("rel/%j", "submitit folder must be an absolute path, got 'rel/%j'"),
    ("/a:b/%j", "apptainer cannot bind the submitit folder '/a:b' (it contains ':'): "
                "choose a folder without them"),
    ("/a b/%j", "enroot cannot bind the submitit folder '/a b' (it contains ' '): "
                "choose a folder without them")])
def test_bad_folders_are_one_line(folder, message):
    kind = message.split()[0] if message.split()[0] in ("apptainer", "enroot") else "apptainer"
    image = "i.sif" if kind == "apptainer" else "i.sqsh"
    with pytest.raises(ValueError) as err:
        submitit_plan(spec(f"runtime: {{kind: {kind}, image: {image}}}"), folder)
    assert str(err.value) == message


def test_the_checked_in_spec_is_the_apptainer_launchers_image():
    from launcher.spec import load_spec
    s = load_spec(str(ROOT / "jobs/sum_submitit.yaml"))
    plan = submitit_plan(s, "/x/%j")
    assert plan.python.endswith("--bind /x:/x --bind \"${PWD}\" launchers.sif python3")
    assert (plan.parameters["nodes"], plan.parameters["ntasks_per_node"]) == (2, 2)


def _answer(rc: int, out: str = "", err: str = ""):
    calls = []

    def run(argv, **_kw):
        calls.append(argv)
        return subprocess.CompletedProcess(argv, rc, out, err)
    return run, calls


def test_image_without_submitit_is_one_line(tmp_path):
    from launcher.submitit import worker_problem
    image = tmp_path / "image.sif"
    image.write_text("")
    run, calls = _answer(1, err="Traceback...\nModuleNotFoundError: No module named 'submitit'\n")
    problem = worker_problem(spec(f"runtime: {{kind: apptainer, image: '{image}'}}"), "1.5.4", run)
    assert problem == ("submitit's worker cannot run in this image (ModuleNotFoundError: No "
                       "module named 'submitit'); it needs submitit and cloudpickle: make "
                       "launchers-image builds launchers.sif with the pinned ones")
    assert calls[0][:4] == ["apptainer", "exec", "--cleanenv", str(image)]
    assert calls[0][4:6] == ["python3", "-I"]


def test_image_with_another_submitit_is_one_line_and_the_same_passes(tmp_path):
    from launcher.submitit import worker_problem
    image = tmp_path / "launchers.sif"
    image.write_text("")
    s = spec(f"runtime: {{kind: apptainer, image: '{image}'}}")
    other, _ = _answer(0, out="SUBMITIT 1.4.0\n")
    assert worker_problem(s, "1.5.4", other) == (
        "the image has submitit 1.4.0, this Python 1.5.4: the worker must read this Python's "
        "pickles; use the same version (requirements/launchers.txt)")
    same, _ = _answer(0, out="SUBMITIT 1.5.4\n")
    assert worker_problem(s, "1.5.4", same) is None


def test_images_that_cannot_be_asked_here_are_not_checked(tmp_path):
    from launcher.submitit import worker_problem
    run, calls = _answer(1)
    sqsh = tmp_path / "image.sqsh"
    sqsh.write_text("")
    assert worker_problem(spec(f"runtime: {{kind: enroot, image: '{sqsh}'}}"), "1.5.4", run) is None
    assert worker_problem(spec("runtime: {kind: apptainer, image: docker://x/y:1}"), "1.5.4",
                          run) is None
    assert worker_problem(spec("runtime: bare"), "1.5.4", run) is None
    assert calls == []
