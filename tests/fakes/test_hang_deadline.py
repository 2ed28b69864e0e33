"""Issue 21, the progress deadline (launch.hang_timeout): the spec key, the jobscript lines,
the hook's progress marks, the watcher's decision and its one line.

Ring 2: the rendered script under the recording fakes; the hook in real Python processes; 4
real gloo ranks under torch.distributed.run where rank 3 stops in its own function, watched by
the kit's own collector and watcher (launcher/node/run.py stacks, as the jobscript runs them).
The pure half: tests/unit/test_hang_deadline.py; real
Slurm: tests/lab/test_hangs.py.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest
import yaml

import launcher
from launcher import kit
from launcher.node import stacks
from launcher.task.hook import sitecustomize as stacks_hook
from tests.helpers.cluster import Cluster
from tests.fakes.test_hangs import JOB, REPO, hook_env
from tests.helpers.hangprog import STUCK, WAITING

BASE = "job: {nodes: 4, time: '1:00:00'}\nsite: jsc\nprogram: [python3, t.py]\n"


# --- ring 2: the rendered script under the recording fakes ----------------------------------


def test_rendered_script_starts_the_watcher_and_ends_with_its_line(tmp_path):
    fakes = Cluster(tmp_path)
    line = "no progress for 130 s: rank 3 on jwb0002 in f at p.py:1; job ended"
    program = ["bash", "-c", f'echo "{line}" >"$$TORCHRUN_JSC_STACKS/no-progress"; exit 0']
    text = yaml.safe_dump({"job": {"nodes": 2}, "site": "jsc", "program": program,
                           "launch": {"mode": "srun", "hang_timeout": 130}})
    done = fakes.run(fakes.render(text))
    assert done.returncode == 124, done.stderr
    assert done.stderr.rstrip("\n").splitlines()[-1] == line
    (watch,) = [r for r in fakes.records("python3") if "watch" in r["argv"]]
    argv = watch["argv"]
    run_py = str(kit.installed() / "node" / "run.py")  # the kit's, isolated (job.sh jsc_watch)
    assert argv[:argv.index("watch")] == ["-I", run_py, "stacks"]
    assert argv[argv.index("--") + 1:][-6:] == ["-I", run_py, "stacks", "node", "4242", "10"]
    assert argv[argv.index("watch"):argv.index("--") + 3] == [
        "watch", "4242", str(fakes.dir / ".hangs" / "4242"), "130", "13", "30", "--", "srun",
        "--overlap"]
    assert (fakes.dir / ".hangs" / "4242" / "progress" / "period").read_text() == "13\n"
    # Without the key: no watcher, and the same program's file is not read.
    plain = yaml.safe_dump({"job": {"nodes": 2}, "site": "jsc", "program": program,
                            "launch": {"mode": "srun"}})
    done = fakes.run(fakes.render(plain, "plain.yaml"))
    assert done.returncode == 0, done.stderr
    assert line not in done.stderr
    assert len([r for r in fakes.records("python3") if "watch" in r["argv"]]) == 1

# --- ring 2: the hook's marks in real processes ----------------------------------------------


@pytest.fixture
def progress_dir(tmp_path):
    """The job's hangs directory; the hook is the kit's (launcher/task/hook, on the
    PYTHONPATH of hook_env as launcher/task/hook.sh puts it)."""
    (tmp_path / "progress").mkdir()
    (tmp_path / "progress" / "period").write_text("1\n")
    return tmp_path


RUN_PY = str(kit.installed() / "node" / "run.py")  # python3 -I KIT/node/run.py stacks ...


PROGRESS_CALLS = """
import multiprocessing as mp
import launcher
def child():
    launcher.progress()
if __name__ == "__main__":
    for _ in range(5):
        launcher.progress()
    p = mp.get_context("fork").Process(target=child); p.start(); p.join()
    print("ok", flush=True)
"""


def test_hook_marks_progress_calls_and_the_end(progress_dir, tmp_path):
    (tmp_path / "prog.py").write_text(PROGRESS_CALLS)
    before = time.time()
    done = subprocess.run([sys.executable, str(tmp_path / "prog.py")],
                          env=hook_env(progress_dir, RANK="6"), capture_output=True, text=True,
                          timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (0, "ok\n", "")
    # One file per node (issue 36), the rank's line at its slot: its rank without a local one.
    node = socket.gethostname().split(".")[0]
    assert sorted(p.name for p in (progress_dir / "progress").iterdir()) == [
        f"marks.{node}", "period"]
    assert (progress_dir / "progress" / f"marks.{node}").stat().st_size == 7 * stacks.MARK_WIDTH
    (mark_,) = stacks.read_marks(str(progress_dir), since=before).values()
    assert (mark_["world"], mark_["calls"], mark_["done"]) == (0, 5, True)
    # The hook module is what launcher.progress() finds; its name is the hook's.
    assert launcher.HOOK_MODULE == stacks_hook.MODULE
    # Without the progress directory (no hang_timeout) nothing is marked.
    (progress_dir / "progress" / "period").unlink()
    (progress_dir / "progress" / f"marks.{node}").unlink()
    subprocess.run([sys.executable, str(tmp_path / "prog.py")],
                   env=hook_env(progress_dir, RANK="6"), check=True, timeout=60)
    assert list((progress_dir / "progress").iterdir()) == []


def test_real_gloo_ranks_watched_until_the_deadline(progress_dir, tmp_path):
    """4 gloo ranks, rank 3 stuck in load_batch after the first all_reduce: the watcher the
    jobscript runs (the kit's) names it, from its marks and stacks, 30 s after the others' last
    move."""
    pytest.importorskip("torch")
    ready = tmp_path / "ready"
    ready.mkdir()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scancel").write_text(f"#!/bin/sh\necho \"$@\" >>{tmp_path}/scancel\n")
    (bin_dir / "scancel").chmod(0o755)
    # squeue -s: the job's steps as Slurm lists them (the KILL goes to the launch's step only)
    (bin_dir / "squeue").write_text(f"#!/bin/sh\nprintf '%s\\n' {JOB}.batch {JOB}.extern {JOB}.0\n")
    (bin_dir / "squeue").chmod(0o755)
    env = hook_env(progress_dir, READY_DIR=str(ready), OMP_NUM_THREADS="1",
                   SLURMD_NODENAME="jwbA")
    p = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone",
                          "--nproc_per_node", "4", str(REPO / "tests/helpers/programs/hang_ranks.py")],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         start_new_session=True)
    try:
        collector = [sys.executable, "-I", RUN_PY, "stacks", "node", JOB, "10"]
        watch_env = dict(os.environ, SLURMD_NODENAME="jwbA",
                         PATH=f"{bin_dir}:{os.environ['PATH']}")
        start = time.time()
        w = subprocess.run([sys.executable, "-I", RUN_PY, "stacks", "watch", JOB,
                            str(progress_dir), "30", "1", "0", "--", *collector],
                           env=watch_env, capture_output=True, text=True, timeout=300)
        took = time.time() - start
        assert w.returncode == 0, w.stdout + w.stderr
        assert len(list(ready.iterdir())) == 4, w.stdout  # every rank was where it stays
        assert "no progress for 3" in w.stdout.splitlines()[0], w.stdout
        assert f"stacks: 3 ranks in all_reduce at {WAITING}; rank 3 on " in w.stdout
        line = (progress_dir / "no-progress").read_text()
        assert line.startswith("no progress for 30 s: rank 3 on "), line
        assert line.endswith(f" in load_batch at {STUCK}, 1 collective behind the "
                             "other 3; job ended\n"), line
        marks = stacks.read_marks(str(progress_dir))
        assert sorted(m["world"] for m in marks.values()) == [1, 2, 2, 2], marks
        assert (tmp_path / "scancel").read_text() == \
            f"--signal=TERM {JOB}\n--signal=KILL {JOB}.0\n"
        assert 30 <= took < 30 + 60, took
        assert p.poll() is None  # the fake scancel ended nothing: this test does
    finally:
        for pid, _, _ in stacks.armed(JOB):
            os.kill(pid, signal.SIGKILL)
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()


COLLECTIVES = """
import os, time
import torch, torch.distributed as dist
dist.init_process_group("gloo")
sub = dist.new_group([0, 1])
t = torch.ones(1)
for _ in range(3):
    dist.all_reduce(t)
dist.all_reduce(t, group=sub)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 4))
model(torch.ones(2, 4)).sum().backward()  # the reducer's all_reduce, issued from C++
world = dist.group.WORLD._get_sequence_number_for_group()
mark = os.path.join(os.environ["TORCHRUN_JSC_STACKS"], "progress", "marks.jwbA")
slot = int(os.environ["LOCAL_RANK"]) * 128
def line():
    with open(mark, "rb") as f:
        return f.read()[slot:slot + 128].decode()
deadline = time.monotonic() + 60  # until the hook's thread has seen it (it looks every 1 s)
while " world=%d " % world not in line() and time.monotonic() < deadline:
    time.sleep(0.1)
os.write(1, b"world %d\\n" % world)  # one write: the two ranks share the pipe
dist.destroy_process_group()
"""


def test_hook_counts_real_collectives_and_keeps_them_at_the_end(progress_dir, tmp_path):
    """2 gloo ranks: the done mark holds what torch's sequence numbers counted (the default
    group's and every group's, DDP's backward included) up to the thread's last look."""
    pytest.importorskip("torch")
    (tmp_path / "coll.py").write_text(COLLECTIVES)
    before = time.time()
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc_per_node", "2", str(tmp_path / "coll.py")],
                          env=hook_env(progress_dir, OMP_NUM_THREADS="1", SLURMD_NODENAME="jwbA"),
                          capture_output=True,
                          text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    marks = stacks.read_marks(str(progress_dir), since=before)
    assert sorted(marks) == [0, 1] and all(m["done"] for m in marks.values()), marks
    # The done mark holds the last count the thread saw (destroy_process_group() has emptied
    # torch's list by atexit), so at most what the program printed before it: under load the
    # last look may come before the final collectives (it failed once so in a full run).
    counts = [int(n) for n in re.findall(r"^world (\d+)$", done.stdout, re.M)]
    assert len(counts) == 2, done.stdout
    printed = min(counts)
    assert printed >= 5, done.stdout  # 3 all_reduces, DDP's broadcast(s), a bucket at least
    assert all(0 < m["world"] <= printed and m["all"] >= m["world"] for m in marks.values()), \
        (marks, printed)

