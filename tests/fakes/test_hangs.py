"""Ring 2, issue 21, a job that hangs explains itself (real local processes, no Slurm): the
stack hook in plain Python processes, and 4 real gloo ranks under torch.distributed.run where
rank 3 is stuck in its own function while the others wait in all_reduce, collected by the
very text the jobscript ships; `jsc-compose stacks --wait 0.5` through a real pipe, with a node
that never answers."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launcher import __version__, cli, kit
from launcher.submit import stacks as stacks_step
from launcher.features import hangs as hangs_feature
from launcher.node import stacks
from launcher.task.hook import sitecustomize as stacks_hook
from launcher.render.jobscript import render_jobscript
from launcher.spec import load_spec
from tests.helpers.hangprog import STUCK, WAITING

REPO = Path(__file__).resolve().parents[2]

# --- the hook in real processes --------------------------------------------------------------


HOOK = kit.installed() / "task" / "hook"  # the kit's, as launcher/task/hook.sh puts it


@pytest.fixture
def hookdir(tmp_path):
    d = tmp_path / "hangs"
    d.mkdir()
    return d


JOB = str(700000 + os.getpid())  # a job id of this test run only


def hook_env(d: Path, **extra):
    env = dict(os.environ, PYTHONPATH=f"{HOOK}:{REPO}", TORCHRUN_JSC_STACKS=str(d),
               SLURM_JOB_ID=JOB, **extra)
    env.pop(stacks_hook.PID_ENV, None)
    return env


# The rank and a forked and a spawned child stay up until stdin closes.
CHILDREN = """
import multiprocessing as mp, os, sys, time
def child(ev):
    ev.wait(60)
if __name__ == "__main__":
    procs = []
    for how in ("fork", "spawn"):
        ctx = mp.get_context(how)
        ev = ctx.Event()
        p = ctx.Process(target=child, args=(ev,)); p.start(); procs.append((p, ev))
    print("ok", " ".join(str(p.pid) for p, _ in procs), flush=True)
    sys.stdin.read()
    for p, ev in procs:
        ev.set(); p.join()
"""
# Prints whether this process holds a dump file of the hook (an armed rank).
ARMED = """
import os
def target(fd):
    try:
        return os.readlink("/proc/self/fd/" + fd)
    except OSError:
        return ""
print(any(stacks_prefix in target(fd) for fd in os.listdir("/proc/self/fd")))
""".replace("stacks_prefix", repr(stacks_hook.DUMP_PREFIX + "."))


def test_normal_run_undisturbed_and_children_unarmed(hookdir, tmp_path):
    """Issue 36: the rank's dump file is node-local and nameless (read through /proc): nothing
    of it on shared storage; the collector finds the rank and no child."""
    (tmp_path / "children.py").write_text(CHILDREN)
    p = subprocess.Popen([sys.executable, str(tmp_path / "children.py")],
                         env=hook_env(hookdir, RANK="5"), stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline()
        assert line.startswith("ok "), line + p.stderr.read()
        (pid, path, _), = stacks.armed(JOB)  # the rank only: no child armed itself
        assert pid == p.pid and path.startswith(f"/proc/{p.pid}/fd/"), path
        header = Path(path).read_text()
        host = socket.gethostname().split(".")[0]
        assert header.startswith(f"# jsc-stacks rank=5 local_rank=? host={host} pid={p.pid} ")
        assert header.count("\n") == 1  # the header, nothing else
        assert os.readlink(path).startswith(f"/memfd:{stacks_hook.DUMP_PREFIX}.{host}.{p.pid}")
    finally:
        out, err = p.communicate("", timeout=60)
    assert (p.returncode, out, err) == (0, "", "")
    assert list(hookdir.iterdir()) == []  # no file on shared storage
    # Without a rank variable (torchrun's agent, the batch shell's python) nothing is armed,
    # nor with only an MPI one (srun --mpi=pmix, psslurm, mpirun put it on the agent too) ...
    for mpi in ({}, {"PMIX_RANK": "0"}, {"PMI_RANK": "1"}, {"OMPI_COMM_WORLD_RANK": "2"}):
        done = subprocess.run([sys.executable, "-c", ARMED], env=hook_env(hookdir, **mpi),
                              capture_output=True, text=True, check=True)
        assert done.stdout == "False\n", mpi
    # ... unless the mode's ranks are MPI's (horovod: the jobscript names them)
    done = subprocess.run([sys.executable, "-c", ARMED], capture_output=True, text=True,
                          check=True, env=hook_env(
        hookdir, PMI_RANK="7", TORCHRUN_JSC_STACKS_RANK_VARS="OMPI_COMM_WORLD_RANK PMI_RANK"))
    assert done.stdout == "True\n"
    assert list(hookdir.iterdir()) == []


def test_chains_to_the_hidden_sitecustomize(hookdir, tmp_path_factory):
    other = tmp_path_factory.mktemp("other")
    (other / "sitecustomize.py").write_text("import os\nos.environ['CHAINED'] = '1'\n")
    env = hook_env(hookdir, RANK="0")
    env["PYTHONPATH"] = f"{HOOK}:{other}"
    done = subprocess.run([sys.executable, "-c", "import os; print(os.environ.get('CHAINED'))"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.stdout == "1\n", done.stderr


def test_signal_dumps_and_collector_reads(hookdir):
    # 'up' from inside stuck(): a signal right after it still finds the process there.
    prog = "import time\ndef stuck():\n    print('up', flush=True)\n    time.sleep(60)\nstuck()\n"
    p = subprocess.Popen([sys.executable, "-c", prog], env=hook_env(hookdir, RANK="2"),
                         stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline() == "up\n"
        (rec,) = stacks.collect(JOB, wait_s=10)
        assert rec["rank"] == "2" and rec["pid"] == p.pid and rec["dump"]
        assert stacks.where(stacks.main_stack(rec)) in ("stuck at <string>:3",
                                                        "stuck at <string>:4")
        assert stacks.collect("1", wait_s=1) == []  # another job's: not touched
        assert p.poll() is None  # still running after the dump
    finally:
        p.kill()
        p.wait()


# srun's stand-in for `jsc-compose stacks`: the first node's collector runs here for real (the
# kit's, `python3 -I KIT/node/run.py stacks node JOB WAIT`); the second node never answers.
LATE_SRUN = """#!/bin/sh
while [ "$#" -gt 0 ]; do case "$1" in --*) shift ;; *) break ;; esac; done
printf '%s\\n' "$*" >"$SRUN_ARGS"
"$@"
exec sleep 60
"""


def test_cli_stacks_keeps_the_ranks_read_before_a_timeout(hookdir, tmp_path, monkeypatch,
                                                          capsys):
    prog = "import time\ndef stuck():\n    print('up', flush=True)\n    time.sleep(60)\nstuck()\n"
    p = subprocess.Popen([sys.executable, "-c", prog], env=hook_env(hookdir, RANK="2"),
                         stdout=subprocess.PIPE, text=True)
    srun = tmp_path / "bin" / "srun"
    srun.parent.mkdir()
    srun.write_text(LATE_SRUN)
    srun.chmod(0o755)
    for name, value in {"PATH": f"{srun.parent}:{os.environ['PATH']}", "SLURM_JOB_ID": JOB,
                        "SLURM_JOB_NUM_NODES": "2", "SRUN_ARGS": str(tmp_path / "args")}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(stacks_step, "STEP_MARGIN_S", 3)
    try:
        assert p.stdout.readline() == "up\n"
        start = time.monotonic()
        assert cli.main(["stacks", "--wait", "0.5"]) == 1
        took = time.monotonic() - start
    finally:
        p.kill()
        p.wait()
    out, err = capsys.readouterr()
    assert (tmp_path / "args").read_text() == \
        f"python3 -I {kit.installed()}/node/run.py stacks node {JOB} 0.5\n"  # the fraction kept
    assert 3.5 <= took < 10  # killed at its limit, not after the second node's 60 s
    host = out.split(" on ", 1)[1].split(" ", 1)[0]
    assert out.startswith(f"stacks: rank 2 on {host} in stuck at <string>:"), out
    assert err.endswith(f"stacks: the collection timed out after 3.5 s: 1 rank from 1 of 2 "
                        f"nodes ({host}) above; the ranks of the other 1 node are missing\n"), err


@pytest.mark.parametrize("agent_env", [{}, {"PMIX_RANK": "0"}, {"PMI_RANK": "0"},
                                       {"OMPI_COMM_WORLD_RANK": "0"}],
                         ids=["none", "pmix", "psslurm", "openmpi"])
def test_real_gloo_ranks_one_stuck(hookdir, tmp_path, agent_env):
    """Issue 26: the agent may carry an MPI rank variable (srun --mpi=pmix, psslurm, mpirun
    in mode mpirun_torchrun); its workers are armed all the same, the agent never."""
    pytest.importorskip("torch")
    ready = tmp_path / "ready"
    ready.mkdir()
    env = hook_env(hookdir, READY_DIR=str(ready), OMP_NUM_THREADS="1", SLURMD_NODENAME="jwbA",
                   **agent_env)
    p = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone",
                          "--nproc_per_node", "4",
                          str(REPO / "tests/helpers/programs/hang_ranks.py")],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while len(list(ready.iterdir())) < 4 and time.monotonic() < deadline:
            assert p.poll() is None, p.stdout.read()
            time.sleep(0.5)
        run_py = str(kit.installed() / "node" / "run.py")  # as the jobscript runs it

        def collect(node_name: str) -> subprocess.CompletedProcess:
            return subprocess.run([sys.executable, "-I", run_py, "stacks", "node", JOB, "10"],
                                  capture_output=True, text=True, timeout=60,
                                  env=dict(os.environ, SLURMD_NODENAME=node_name))
        # A collector on another node of a shared kernel (the lab) leaves these ranks alone.
        assert collect("jwbB").stdout == ""
        # Ranks 0-2 go from their ready mark into all_reduce: ask again until they are there.
        while True:
            node = collect("jwbA")
            assert len(node.stdout.splitlines()) == 4, node.stdout + node.stderr  # no agent
            rep = subprocess.run([sys.executable, "-I", run_py, "stacks", "report", JOB],
                                 input=node.stdout,
                                 capture_output=True, text=True, timeout=60)
            first = rep.stdout.splitlines()[0]
            if first.startswith("stacks: 3 ranks in all_reduce") or time.monotonic() > deadline:
                break
        assert first.startswith(f"stacks: 3 ranks in all_reduce at {WAITING}; rank 3 on "), \
            rep.stdout
        assert first.endswith(f" in load_batch at {STUCK}"), rep.stdout
        assert p.poll() is None  # the dumps did not end the job
    finally:
        # torchrun's workers have sessions of their own: end them by the pids found.
        for pid, _, _ in stacks.armed(JOB):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass  # gone already (torchrun ends its other workers once one is killed)
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()


def job_sh(script: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    """``script`` after sourcing the kit's launcher/node/job.sh, as a jobscript does."""
    text = f'kit={kit.installed()}\nsource "$kit/node/job.sh" {__version__}\n{script}'
    return subprocess.run(["bash", "-euc", text], capture_output=True, text=True, timeout=30,
                          check=False, cwd=cwd, env={"PATH": os.environ["PATH"], **env})


@pytest.mark.parametrize("rc, dumps, said", [(1, ["rank-0", "rank-1"], True), (0, ["rank-0"], False),
                                            (134, [], False)])
def test_failed_launch_names_the_flight_recorder_dumps(tmp_path, rc, dumps, said):
    """launcher/node/job.sh jsc_after_launch, run by bash: a failed launch with dumps in fr/
    says where they are and how to read them; otherwise nothing. The job's directory stays
    where it holds dumps, and goes where it holds nothing (issue 36)."""
    hangs = tmp_path / ".hangs" / "77"
    (hangs / "fr").mkdir(parents=True)
    (hangs / "progress").mkdir()
    (hangs / "progress" / "marks.jwb0001").write_text("x")
    for name in dumps:
        (hangs / "fr" / name).write_text("x")
    done = job_sh("jsc_after_launch", tmp_path, hangs_dir=str(hangs), SLURM_JOB_ID="77",
                  launch_rc=str(rc))
    want = (f"job 77: flight recorder: {len(dumps)} rank dumps in {hangs}/fr; which rank "
            f"missed which collective: python3 -m torch.distributed.flight_recorder.fr_trace "
            f"{hangs}/fr -p rank- (in the image)\n") if said else ""
    assert (done.returncode, done.stdout, done.stderr) == (0, "", want)
    assert hangs.is_dir() == bool(dumps)
    assert (tmp_path / ".hangs").is_dir()  # the parent stays: another job may be starting


def test_the_watchers_line_keeps_the_directory(tmp_path):
    """A job ended by the progress deadline keeps .hangs/JOBID (its line, the marks), prints
    the line last and exits 124; a job the watcher left alone has its directory removed."""
    hangs = tmp_path / ".hangs" / "78"
    (hangs / "fr").mkdir(parents=True)
    script = "sleep 60 & jsc_watch_pid=$!\njsc_after_launch"
    done = job_sh(script, tmp_path, hangs_dir=str(hangs), SLURM_JOB_ID="78", launch_rc="0")
    assert (done.returncode, done.stderr) == (0, "")
    assert not hangs.exists()
    (hangs / "fr").mkdir(parents=True)
    (hangs / "no-progress").write_text("no progress for 130 s: rank 3 on jwb0002; job ended\n")
    done = job_sh(script, tmp_path, hangs_dir=str(hangs), SLURM_JOB_ID="78", launch_rc="143")
    assert (done.returncode, done.stderr) == (
        124, "no progress for 130 s: rank 3 on jwb0002; job ended\n")
    assert (hangs / "no-progress").exists()


@pytest.mark.parametrize("given, fr, nccl", [
    ({}, "2000", "2000"),
    ({"TORCH_NCCL_TRACE_BUFFER_SIZE": "5000"}, "5000", "5000"),
    ({"TORCH_FR_BUFFER_SIZE": "7"}, "7", "7"),
    ({"TORCH_FR_BUFFER_SIZE": "7", "TORCH_NCCL_TRACE_BUFFER_SIZE": "9"}, "7", "9"),
])
def test_flight_recorder_names_carry_the_users_value(tmp_path, given, fr, nccl):
    """Either name the user set reaches both (torch < 2.8 reads one, >= 2.8 the other): the
    kit's default never replaces a value the user gave under the other name."""
    done = job_sh('jsc_hangs_setup RANK\n'
                  'echo "$TORCH_FR_BUFFER_SIZE $TORCH_NCCL_TRACE_BUFFER_SIZE $TORCH_FR_DUMP_TEMP_FILE"',
                  tmp_path, SLURM_JOB_ID="5", **given)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [fr, nccl, f"{tmp_path}/.hangs/5/fr/rank-"]


@pytest.mark.parametrize("env, version, dropped", [
    ({"TORCH_FR_BUFFER_SIZE": "2000", "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000"}, "2.11.0+cu130",
     ["TORCH_NCCL_TRACE_BUFFER_SIZE"]),
    ({"TORCH_FR_BUFFER_SIZE": "2000", "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000"}, "2.7.1", []),
    ({"TORCH_FR_BUFFER_SIZE": "7", "TORCH_NCCL_TRACE_BUFFER_SIZE": "9"}, "2.13.0", []),
    ({"TORCH_FR_DUMP_TEMP_FILE": "/h/fr/rank-", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": "/h/fr/rank-"},
     "2.8.0", ["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"]),
    ({"TORCH_NCCL_TRACE_BUFFER_SIZE": "2000"}, "2.13.0", []),
])
def test_hook_drops_the_deprecated_name_only_where_nothing_is_lost(env, version, dropped):
    """torch >= 2.8 warns on every rank for each deprecated TORCH_NCCL_* name that is set; the
    hook unsets one only when its current name carries the same value."""
    before = dict(env)
    assert stacks_hook.drop_deprecated_fr(env, version) == dropped
    assert env == {k: v for k, v in before.items() if k not in dropped}
