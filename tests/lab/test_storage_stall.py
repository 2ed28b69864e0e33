"""Issue 36 item 4, ring 3 (root, no Slurm): the progress deadline is immune to a stall of
the shared file system. A directory on a file system of its own (ext4 in a loop file) is
frozen (fsfreeze: every write blocks in the kernel, reads go on) while 4 ranks step through the
kit's real hook and the kit's real watcher (launcher/node/run.py stacks watch, as the
jobscript starts it) looks every second. Root: a loop mount and fsfreeze (make test-fast, rings
1 and 2, runs without root). The watcher's decisions with an injected clock:
tests/unit/test_hang_deadline.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launcher import kit
from launcher.node import stacks
from tests.fakes.test_hangs import JOB, hook_env

RUN_PY = str(kit.installed() / "node" / "run.py")  # python3 -I KIT/node/run.py stacks ...

STEPPING = """
import os, sys, time
import torchrun_jsc_kit
print("up", flush=True)
while not os.path.exists(sys.argv[1]):  # steps: progress() 20 times a second
    torchrun_jsc_kit.progress()
    time.sleep(0.05)
def stuck():
    time.sleep(600)
stuck()
"""


def blocked_in_the_kernel(pid: int) -> bool:
    """Is some thread of process ``pid`` in uninterruptible sleep (D), e.g. a write that a
    frozen file system holds?"""
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue
        if stat[stat.rindex(")") + 2] == "D":
            return True
    return False


def wait_until(what, timeout: float, why: str) -> None:
    deadline = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < deadline, why
        time.sleep(0.1)


@pytest.fixture
def frozen_dir(tmp_path):
    """A directory on a file system of its own (ext4 in a loop file) that ``freeze()`` makes
    hold every write (fsfreeze: writers block in the kernel, reads go on) until ``thaw()``: a
    shared file system's stall without FUSE. Root, as the lab; thawed and unmounted after."""
    assert os.geteuid() == 0, "this test mounts and freezes a file system: run ring 3 as root"
    image, mnt = tmp_path / "fs.img", tmp_path / "mnt"
    mnt.mkdir()
    with open(image, "wb") as f:
        f.truncate(32 << 20)
    subprocess.run(["mkfs.ext4", "-q", str(image)], check=True, timeout=60)
    subprocess.run(["mount", "-o", "loop", str(image), str(mnt)], check=True, timeout=60)

    def freeze():
        subprocess.run(["fsfreeze", "-f", str(mnt)], check=True, timeout=60)

    def thaw():
        subprocess.run(["fsfreeze", "-u", str(mnt)], check=False, timeout=60,
                       capture_output=True)
    try:
        yield mnt, freeze, thaw
    finally:
        thaw()
        subprocess.run(["umount", str(mnt)], check=False, timeout=60)


def test_a_frozen_mark_directory_does_not_end_a_stepping_job(frozen_dir, tmp_path):
    """4 ranks (2 nodes' mark files) step through the real hook; the real watcher (6 s
    deadline, 1 s looks) watches. The file system under the marks freezes for twice the
    deadline: the ranks' mark writes and the watcher's own probe block in the kernel (seen in
    /proc: D). After the thaw the marks land with their old stamps: the watcher says the
    storage stalled and goes on; the job steps on past a deadline; once the ranks stop, it ends
    the job a deadline later. (The watcher before issue 36 ended it at the thaw.)"""
    mnt, freeze, thaw = frozen_dir
    hangs = mnt / "hangs"
    (hangs / "progress").mkdir(parents=True)
    (hangs / "progress" / "period").write_text("1\n")
    stop = tmp_path / "stop"
    (tmp_path / "prog.py").write_text(STEPPING)
    ranks = [subprocess.Popen([sys.executable, str(tmp_path / "prog.py"), str(stop)],
                              env=hook_env(hangs, RANK=str(r), LOCAL_RANK=str(r % 2),
                                           SLURMD_NODENAME=f"jwb{r // 2}"),
                              stdout=subprocess.PIPE, text=True) for r in range(4)]
    watcher = None
    try:
        for p in ranks:
            assert p.stdout.readline() == "up\n"
        wait_until(lambda: len([m for m in stacks.read_marks(str(hangs)).values()
                                if m["calls"]]) == 4, 60, "every rank's first progress")
        assert sorted(p.name for p in (hangs / "progress").iterdir()) == [
            "marks.jwb0", "marks.jwb1", "period"]  # one file per node
        collector = [sys.executable, "-I", RUN_PY, "stacks", "node", JOB, "2"]
        watcher = subprocess.Popen([sys.executable, "-I", RUN_PY, "stacks", "watch", JOB,
                                    str(hangs), "6", "1", "0", "--", *collector],
                                   env=dict(os.environ, PATH=f"{tmp_path}:{os.environ['PATH']}"),
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        (tmp_path / "scancel").write_text("#!/bin/sh\n")  # nothing to end: no Slurm here
        (tmp_path / "squeue").write_text("#!/bin/sh\n")
        for name in ("scancel", "squeue"):
            (tmp_path / name).chmod(0o755)
        wait_until(lambda: (hangs / "progress" / "watcher").exists(), 30, "the watcher's look")
        freeze()
        frozen_at = time.monotonic()
        # The writes are held: the watcher's probe and every rank's mark thread in the kernel.
        wait_until(lambda: blocked_in_the_kernel(watcher.pid), 30, "the watcher's write held")
        wait_until(lambda: all(blocked_in_the_kernel(p.pid) for p in ranks), 30,
                   "the ranks' mark writes held")
        while time.monotonic() < frozen_at + 12:  # the stall: twice the deadline
            assert watcher.poll() is None and not (hangs / "no-progress").exists()
            time.sleep(0.2)
        thaw()
        thawed = time.time()
        # The ranks step on past a deadline after the thaw: the job is not ended.
        wait_until(lambda: min(m["t"] for m in stacks.read_marks(str(hangs)).values())
                   > thawed + 8, 60, "marks written after the thaw")
        assert watcher.poll() is None, watcher.stdout.read()
        assert not (hangs / "no-progress").exists()
        stop.write_text("")  # now the ranks make no progress
        stopped = time.monotonic()
        out, _ = watcher.communicate(timeout=120)
        took = time.monotonic() - stopped
    finally:
        thaw()
        for p in ranks + ([watcher] if watcher else []):
            p.kill()
            p.wait()
    print(out)
    lines = out.splitlines()
    assert lines[0].startswith(f"job {JOB}: launch.hang_timeout: storage stalled: "), out
    assert "time in a stall is not counted as no progress: the deadline counts from now" \
        in lines[0], out
    assert lines[1].startswith(f"job {JOB}: no progress for 6 s (launch.hang_timeout 6)"), out
    assert 6 <= took < 6 + 30, took
    assert (hangs / "no-progress").read_text().startswith("no progress for 6 s: all 4 ranks in ")
