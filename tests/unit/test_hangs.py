"""Ring 1, issue 21, a job that hangs explains itself: rendezvous timeouts by node count,
the grouped report, the jobscript lines, `jsc-compose stacks` (a fractional --wait kept, a bad
one refused in one line, the ranks read before a timeout reported with what is missing); the
hook's prelude in every launch, once, inside the container, never in the doctor's checks."""

from __future__ import annotations

import json
import shlex
import subprocess

import pytest
import yaml

from launcher import cli, kit
from launcher.submit import stacks as stacks_step
from launcher.features import hangs as hangs_feature
from launcher.node import stacks
from launcher.render.jobscript import render_jobscript
from launcher.model import SpecError
from launcher.modes import MODES, plan_launch
from launcher.plan import build_plan
from launcher.modes.common import rdzv_conf_arg, rdzv_timeouts, user_rdzv_conf
from launcher.shell import Var, resolve, word
from launcher.spec import load_spec, parse_spec
from tests.unit.test_render import spec_of

BASE = "job: {nodes: 2}\nsite: jsc\nprogram: [python3, t.py]\n"

# --- timeouts --------------------------------------------------------------------------------


def test_timeouts_grow_with_the_node_count():
    assert rdzv_timeouts(1) == (601, 120)
    assert rdzv_timeouts(4) == (604, 122)
    assert rdzv_timeouts(1024) == (1624, 632)


def test_user_rdzv_conf_is_kept_after_the_kits():
    assert user_rdzv_conf(["torchrun_jsc"]) is None
    assert user_rdzv_conf(["torchrun_jsc", "--rdzv_conf=read_timeout=5"]) == "read_timeout=5"
    assert user_rdzv_conf(["torchrun", "--rdzv-conf", "join_timeout=9", "--x"]) == \
        "join_timeout=9"
    spec = spec_of(BASE + "launch: {mode: torchrun, command: [torchrun_jsc, "
                   "--rdzv_conf=read_timeout=5]}")
    assert rdzv_conf_arg(spec) == word("--rdzv_conf=join_timeout=", Var("rdzv_join_timeout"),
                                       ",read_timeout=", Var("rdzv_read_timeout"),
                                       ",read_timeout=5")
    text = render_jobscript(spec)
    assert "rdzv_conf_user=" not in text  # the command's flag replaces torch's variable
    plain = render_jobscript(spec_of(BASE + "launch: {mode: torchrun}"))
    assert 'rdzv_conf_user="${PET_RDZV_CONF:+,${PET_RDZV_CONF}}"' in plain
    assert "rdzv_join_timeout=$((600 + 1 * nnodes))" in plain
    assert "rdzv_read_timeout=$((120 + nnodes / 2))" in plain


def test_timeouts_in_both_torchrun_modes_only():
    for mode in ("torchrun", "mpirun_torchrun"):
        _, plan = plan_launch(spec_of(BASE + f"launch: {{mode: {mode}}}"))
        assert any(isinstance(t, type(word("a", Var("b")))) and Var("rdzv_join_timeout")
                   in t.parts for t in plan.task), mode
    assert "rdzv_join_timeout" not in render_jobscript(spec_of(BASE + "launch: {mode: srun}"))


def test_shell_computes_what_the_preview_shows():
    for n in (1, 7, 1024):
        out = subprocess.run(["bash", "-c", f"nnodes={n}; echo $((600 + 1 * nnodes)) "
                              "$((120 + nnodes / 2))"], capture_output=True, text=True)
        assert out.stdout.split() == [str(v) for v in rdzv_timeouts(n)]

# --- report ----------------------------------------------------------------------------------


def dump(*threads_):
    out = []
    for i, (name, frames) in enumerate(threads_):
        out.append(f"{'Current thread' if i == 0 else 'Thread'} 0x{name:016x} "
                   "(most recent call first):")
        out += [f'  File "{f}", line {ln} in {fn}' for f, ln, fn in frames]
        out.append("")
    return "\n".join(out)


C10D = ("/v/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", "3252",
        "all_reduce")
LOGGER = ("/v/lib/python3.11/site-packages/torch/distributed/c10d_logger.py", "83", "wrapper")
TRAIN = ("/home/u/train.py", "42", "step")
DATA = ("/home/u/data.py", "17", "load_batch")


def record(rank, host, frames, main=7):
    return {"rank": str(rank), "host": host, "pid": 100 + rank, "main": str(main),
            "state": "S", "dump": dump((9, [("/usr/lib/python3.11/threading.py", "320",
                                              "wait")]), (main, frames))}


def test_report_groups_ranks_and_names_the_odd_one_out():
    records = [record(r, "jwb0001" if r < 4 else "jwb0002", [C10D, LOGGER, TRAIN])
               for r in range(8) if r != 3]
    records.append(record(3, "jwb0001", [DATA, TRAIN]))
    text = stacks.report(records, "42")
    first = text.splitlines()[0]
    assert first == ("stacks: 7 ranks in all_reduce at train.py:42; "
                     "rank 3 on jwb0001 in load_batch at data.py:17")
    assert "8 ranks on 2 nodes of job 42, 2 different stacks" in text
    assert "== 7 ranks (0-2,4-7 on jwb0001, jwb0002) in all_reduce at train.py:42" in text
    assert '    File "/home/u/data.py", line 17 in load_batch' in text
    assert "(+ 1 other thread in rank 0's dump)" in text


def test_main_thread_by_id_else_the_oldest():
    rec = record(0, "h", [TRAIN], main=7)
    assert stacks.main_stack(rec) == [TRAIN]
    rec["main"] = None
    assert stacks.main_stack(rec) == [TRAIN]  # the last thread listed is the oldest


def test_ranks_without_dump_and_no_ranks():
    text = stacks.report([record(0, "a", [TRAIN]), {"rank": "1", "host": "b", "dump": None,
                                                     "state": "D"}])
    assert text.splitlines()[0] == ("stacks: rank 0 on a in step at train.py:42; "
                                     "rank 1 on b: no stack (process state D)")
    assert "no armed rank found in job 5" in stacks.report([], "5")
    assert stacks.ranges([0, 1, 2, 4, 7, 8]) == "0-2,4,7-8"
    assert stacks.where([C10D, LOGGER]) == "all_reduce at distributed_c10d.py:3252"


def test_records_from_mixed_output():
    lines = ["srun: warning", json.dumps({"rank": "0"}), "{broken", ""]
    assert stacks.read_records(lines) == [{"rank": "0"}]

# --- jobscript -------------------------------------------------------------------------------


def test_jobscript_lines():
    """The jobscript calls the kit's functions (launcher/node/job.sh) by name; what they do
    (the directory, the variables, the flight recorder, the traps, the collector) is the
    kit's file, sourced, never copied into the script."""
    text = render_jobscript(load_spec("jobs/ddp_container.yaml"))
    lines = text.splitlines()
    assert "#SBATCH --signal=B:URG@60" in text
    setup = next(i for i, line in enumerate(lines) if line.startswith("jsc_hangs_setup RANK  # "))
    assert setup < next(
        i for i, line in enumerate(lines) if line.startswith("srun --kill-on-bad-exit=1"))
    assert lines[-3:] == [lines[-3], "jsc_wait_launch", 'exit "$launch_rc"']
    assert lines[-3].endswith(" &")  # in the background: the traps run while it runs
    assert 'sh "${kit}/task/hook.sh" python3 "${kit}/task/run.py" torchrun_jsc ' in \
        text.replace(" \\\n    ", " ")
    # The batch shell leaves PYTHONPATH alone: each task's prelude (hook.sh) edits its own.
    assert "PYTHONPATH" not in text
    job_sh = (kit.installed() / "node" / "job.sh").read_text(encoding="utf-8")
    for line in ['hangs_dir="$PWD/.hangs/$SLURM_JOB_ID"',
                 'export TORCHRUN_JSC_STACKS="$hangs_dir"',
                 'export TORCHRUN_JSC_STACKS_RANK_VARS="$*"',
                 'TORCH_FR_DUMP_TEMP_FILE="${TORCH_FR_DUMP_TEMP_FILE:-'
                 '${TORCH_NCCL_DEBUG_INFO_TEMP_FILE:-$hangs_dir/fr/rank-}}"',
                 "trap 'jsc_print_stacks SIGURG' URG", "trap 'jsc_print_stacks SIGTERM' TERM",
                 'wait "$launch_pid" || launch_rc=$?',
                 'python3 -I "$kit/node/run.py" stacks report "${SLURM_JOB_ID}"']:
        assert line in job_sh, line
    assert "PYTHONPATH" not in "\n".join(line for line in job_sh.splitlines()
                                        if not line.lstrip().startswith("#"))
    # The collector the trap runs is the one `jsc-compose stacks` runs (features.hangs).
    start = "\njsc_collector() {\n    jsc_live\n    collector=("
    body = job_sh[job_sh.index(start) + len(start):]
    body = body[:body.index(")\n}\n")]  # the array's words, over its lines
    # with no node retired by the spares' supervisor (jsc_live: nothing excluded, $nnodes;
    # after a loss: tests/fakes/test_live_nodes.py)
    body = body.replace('${live_where[@]+"${live_where[@]}"}', "").replace("live_nnodes",
                                                                           "nnodes")
    assert shlex.split(body) == resolve(
        hangs_feature.stacks_srun(Var("SLURM_JOB_ID"), Var("nnodes"), "$kit"), {})
    # The hook's prelude is the kit's file: the hook directory first, the image's path after.
    hook = kit.installed() / "task" / "hook.sh"
    done = subprocess.run(["sh", str(hook), "sh", "-c", 'printf %s "$PYTHONPATH"'],
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": "/opt/image-lib"},
                          capture_output=True, text=True, timeout=30, check=True)
    assert done.stdout == f"{kit.installed()}/task/hook:/opt/image-lib"
    assert (kit.installed() / "task" / "hook" / "sitecustomize.py").is_file()


def test_signal_left_to_requeue_and_to_the_user():
    requeue = render_jobscript(load_spec("jobs/ddp_requeue.yaml"))
    assert requeue.count("#SBATCH --signal=") == 1 and "--signal=B:URG" not in requeue
    own = render_jobscript(spec_of("job: {nodes: 2, sbatch: {signal: 'B:USR2@30'}}\nsite: jsc\n"
                                   "program: [python3, t.py]\nlaunch: {mode: srun}"))
    assert own.count("#SBATCH --signal=") == 1


def test_doctor_script_has_no_hook():
    text = render_jobscript(load_spec("jobs/ddp_container.yaml"), doctor=True)
    assert "jsc_hangs_setup" not in text and "hook.sh" not in text and "hangs_dir" not in text
    assert "jsc_hangs_setup RANK" in render_jobscript(load_spec("jobs/ddp_container.yaml"))


def test_preflight_checks_enter_the_container_without_the_hook():
    spec = spec_of(BASE + "launch: {mode: torchrun, preflight: true}\n"
                   "runtime: {kind: apptainer, image: i.sif}")
    text = render_jobscript(spec).replace(" \\\n   ", "")  # one line per command
    preflight = text[text.index("# Preflight"):text.index("# Launch")]
    assert (' -- apptainer exec --bind "${kit}:${kit}:ro" --bind "${PWD}" i.sif || { echo '
            '"preflight: ') in preflight and "hook.sh" not in preflight
    assert 'i.sif sh "${kit}/task/hook.sh" python3 "${kit}/task/run.py" torchrun_jsc ' in \
        text[text.index("# Launch"):]


HOOK = hangs_feature.hook_argv([])
IMAGES = {"apptainer": "i.sif", "enroot": "i.sqsh", "pyxis": "i.sqsh", "bare": None}


def hooked_plans():
    """(mode, runtime, spec) for every pair the spec loader accepts."""
    for mode in MODES:
        for kind, image in IMAGES.items():
            runtime = {"kind": kind, **({"image": image} if image else {})}
            text = yaml.safe_dump({"job": {"nodes": 2}, "site": "jsc", "runtime": runtime,
                                   "launch": {"mode": mode, "procs_per_node": 2},
                                   "program": ["python3", "t.py"]})
            try:
                yield mode, kind, parse_spec(text, "x.yaml")
            except SpecError:  # e.g. pyxis under mpirun: refused, nothing to render
                continue


@pytest.mark.parametrize("mode, kind, spec", list(hooked_plans()),
                         ids=[f"{m}-{k}" for m, k, _ in hooked_plans()])
def test_every_task_starts_through_the_hook_once_inside(mode, kind, spec):
    """Issue 26 item 6: one rule in every mode and runtime. The prelude is in each launch once,
    right where the runtime hands its argv to the container (ContainerRuntime.enter: after
    the image, after Enroot's `env --chdir`, first in a pyxis task), and nothing else differs
    from the plan without it (the preview's)."""
    job = build_plan(spec)  # a jobscript's: the tasks start through the hook's prelude
    rt, plan = job.runtime, job.launch
    _, plain = plan_launch(spec)
    task = list(plan.task)
    starts = [i for i in range(len(task)) if task[i:i + len(HOOK)] == HOOK]
    assert len(starts) == 1, task
    (i,) = starts
    assert task[:i] + task[i + len(HOOK):] == list(plain.task)
    assert not any(t == kit.file(hangs_feature.HOOK_SCRIPT) for t in plan.starter)
    entry = rt.enter([])
    assert task[i - len(entry):i] == entry
    if kind == "pyxis" and plan.task_kind:
        assert i == 0  # the task script runs inside too: the prelude before it
    assert 'sh "${kit}/task/hook.sh" ' in render_jobscript(spec).replace(" \\\n   ", "")


def test_enroot_forwards_the_hook_names_not_pythonpath():
    spec = spec_of(BASE + "launch: {mode: torchrun}\nruntime: {kind: enroot, image: i.sqsh}")
    text = render_jobscript(spec)
    (line,) = [line for line in text.splitlines() if line.startswith("enroot_names=")]
    forwarded = line.split("=", 1)[1].strip("'").split()
    for name in ("TORCHRUN_JSC_STACKS", "TORCHRUN_JSC_STACKS_RANK_VARS",
                 "TORCH_FR_DUMP_TEMP_FILE"):
        assert name in forwarded, name
    # Forwarded, the batch shell's PYTHONPATH would replace the image's own.
    assert "PYTHONPATH" not in forwarded
    # ... unless the spec exports one itself: then, as every name it exports, it is forwarded.
    own = spec_of(BASE + "launch: {mode: torchrun}\nruntime: {kind: enroot, image: i.sqsh}\n"
                  "env: {prepend: {PYTHONPATH: [/opt/mine]}}")
    text = render_jobscript(own)
    (line,) = [line for line in text.splitlines() if line.startswith("enroot_names=")]
    assert "PYTHONPATH" in line.split("=", 1)[1].strip("'").split()


def test_cli_stacks_runs_one_step_per_node(monkeypatch, capsys):
    calls = []

    def fake_run(argv, **kw):
        calls.append(argv)
        out = "3\n" if argv[0] == "squeue" else json.dumps(record(0, "jwb0001", [TRAIN])) + "\n"
        return subprocess.CompletedProcess(argv, 0, out, "")

    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.setattr(stacks_step.subprocess, "run", fake_run)
    assert cli.main(["stacks", "4242"]) == 0
    assert calls[0] == ["squeue", "-h", "-j", "4242", "-o", "%D"]
    assert calls[1][:9] == ["srun", "--overlap", "--jobid=4242", "--nodes=3", "--ntasks=3",
                            "--ntasks-per-node=1", "--cpus-per-task=1", "--kill-on-bad-exit=0",
                            "python3"]
    assert calls[1][-3:] == ["node", "4242", "10"]
    assert capsys.readouterr().out.startswith("stacks: rank 0 on jwb0001 in step at train.py:42")
    assert cli.main(["stacks"]) == 2  # no job id, not inside a job


@pytest.mark.parametrize("wait, sent", [("0.5", "0.5"), ("10", "10"), ("2.25", "2.25"),
                                         ("0", "0"), ("1e-3", "0.001")])
def test_cli_stacks_keeps_fractional_seconds(monkeypatch, wait, sent):
    calls = []

    def fake_run(argv, **kw):
        calls.append((argv, kw.get("timeout")))
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.setenv("SLURM_JOB_NUM_NODES", "2")
    monkeypatch.setattr(stacks_step.subprocess, "run", fake_run)
    assert cli.main(["stacks", "--wait", wait]) == 1  # no rank answered
    ((argv, timeout),) = calls
    assert argv[-3:] == ["node", "4242", sent] and timeout == float(wait) + 120


@pytest.mark.parametrize("wait", ["-1", "-0.5", "nan", "inf", "-inf", "1e999", "soon", ""])
def test_cli_stacks_refuses_a_bad_wait_in_one_line(monkeypatch, capsys, wait):
    monkeypatch.setattr(stacks_step.subprocess, "run", None)  # nothing may run
    assert cli.main(["stacks", "4242", f"--wait={wait}"]) == 2
    err = capsys.readouterr().err
    assert err == ("stacks: --wait: seconds each node waits for its ranks' dumps: a finite "
                   f"number >= 0, e.g. 0.5 or 10, got {wait!r}\n")


def test_seconds_text_loses_nothing():
    for value in (0, 0.5, 10, 10.0, 0.1, 1 / 3, 1e-7, 2.5e6, 1e20):
        text = hangs_feature.seconds_text(value)
        assert float(text) == value and "e+" not in text
    assert hangs_feature.seconds_text(10.0) == "10" and hangs_feature.seconds_text(0.5) == "0.5"
    for bad in (-1, float("nan"), float("inf")):
        with pytest.raises(ValueError):
            hangs_feature.seconds_text(bad)


def timed_out(argv, **kw):
    """srun killed at its limit: two nodes of three printed their ranks, one was cut mid-line
    (bytes, as TimeoutExpired carries them even under text=True)."""
    lines = [json.dumps(record(r, "jwb0001" if r < 2 else "jwb0002", [TRAIN])) for r in range(4)]
    out = ("\n".join(lines) + "\n" + lines[0][:20]).encode()
    raise subprocess.TimeoutExpired(argv, kw["timeout"], output=out, stderr=b"srun: lost\n")


@pytest.mark.parametrize("json_out", [False, True])
def test_cli_stacks_keeps_what_came_before_a_timeout(monkeypatch, capsys, json_out):
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.setenv("SLURM_JOB_NUM_NODES", "3")
    monkeypatch.setattr(stacks_step.subprocess, "run", timed_out)
    assert cli.main(["stacks", "--wait", "0.5"] + (["--json"] if json_out else [])) == 1
    out, err = capsys.readouterr()
    if json_out:
        assert [json.loads(line)["rank"] for line in out.splitlines()] == ["0", "1", "2", "3"]
    else:
        assert out.startswith("stacks: 4 ranks in step at train.py:42\n"
                              "4 ranks on 2 nodes of job 4242")
    assert err == ("srun: lost\nstacks: the collection timed out after 120.5 s: 4 ranks from 2 "
                   "of 3 nodes (jwb0001, jwb0002) above; the ranks of the other 1 node are "
                   "missing\n")


@pytest.mark.parametrize("records, nodes, said", [
    ([], 2, "no node answered; the ranks of all 2 nodes are missing"),
    ([record(0, "a", [TRAIN])], 1, "1 rank from 1 of 1 node (a) above; the last node's list "
                                   "may be cut short"),
])
def test_timed_out_line_says_what_is_missing(records, nodes, said):
    assert stacks_step.timed_out_line(130, nodes, records) == \
        f"stacks: the collection timed out after 130 s: {said}"
