"""Bench section storage (issue 36): what the hang machinery costs the shared file system at
64 nodes x 4 ranks, the kit of this checkout against an earlier one (default: main's).

No Slurm, no torch: 256 plain Python ranks, each started as a task of a kit job is (the kit's
hook first on PYTHONPATH, RANK, LOCAL_RANK, SLURMD_NODENAME of one of 64 node names), make
progress (``torchrun_jsc_kit.progress()``) ten times a second; the job's directory is set up by
each kit's own launcher/node/job.sh (``jsc_hangs_setup``, ``jsc_deadline_setup``), and each
kit's watcher (``stacks watch``, as the jobscript starts it) looks every period. The
directory is watched with inotify (every file and folder under it, the kernel's own count of
what the processes did there): files created, opens (each one an NFS client's
LOOKUP/GETATTR/OPEN round trips), directory listings, writes, reads. Start-up (the ranks
arming) is counted apart from a steady minute. Then the ranks exit (their last mark) and the
job's end runs (``jsc_after_launch``): the files left are counted.

    python -m bench.storage_bench [--before REF] [--period S] [--seconds S]
"""

from __future__ import annotations

import argparse
import ctypes
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

ROOT = Path(__file__).resolve().parent.parent
NODES, PER_NODE = 64, 4
# inotify(7)
IN_ACCESS, IN_MODIFY, IN_ATTRIB, IN_CLOSE_WRITE = 0x1, 0x2, 0x4, 0x8
IN_CLOSE_NOWRITE, IN_OPEN, IN_MOVED_FROM, IN_MOVED_TO = 0x10, 0x20, 0x40, 0x80
IN_CREATE, IN_DELETE, IN_ISDIR = 0x100, 0x200, 0x40000000
EVENTS = {"create": IN_CREATE, "open": IN_OPEN, "write": IN_MODIFY, "read": IN_ACCESS,
          "delete": IN_DELETE, "rename": IN_MOVED_TO}

RANK = """
import os, sys, time
import torchrun_jsc_kit
stop = sys.argv[1]
while not os.path.exists(stop):
    torchrun_jsc_kit.progress()
    time.sleep(0.1)
"""


class Inotify:
    """Every event under a directory tree (folders created later are watched as they come)."""

    def __init__(self, top: Path) -> None:
        self.libc = ctypes.CDLL("libc.so.6", use_errno=True)
        self.fd = self.libc.inotify_init1(os.O_NONBLOCK)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        self.dirs: Dict[int, Path] = {}
        self.counts = {name: 0 for name in EVENTS}
        self.counts["list"] = 0
        for folder, _, _ in os.walk(top):
            self.watch(Path(folder))

    def watch(self, folder: Path) -> None:
        wd = self.libc.inotify_add_watch(self.fd, bytes(folder), 0xFFF)
        if wd >= 0:
            self.dirs[wd] = folder

    def drain(self) -> None:
        while True:
            try:
                data = os.read(self.fd, 1 << 20)
            except BlockingIOError:
                return
            offset = 0
            while offset < len(data):
                wd, mask, _, size = struct.unpack_from("iIII", data, offset)
                name = data[offset + 16:offset + 16 + size].rstrip(b"\0").decode()
                offset += 16 + size
                if mask & IN_ISDIR:
                    if mask & IN_OPEN and not name:
                        self.counts["list"] += 1  # the folder itself opened: a listing
                    if mask & IN_CREATE and wd in self.dirs:
                        self.watch(self.dirs[wd] / name)
                    if mask & IN_CREATE:
                        self.counts["create"] += 1
                    continue
                for key, bit in EVENTS.items():
                    if mask & bit:
                        self.counts[key] += 1

    def take(self) -> Dict[str, int]:
        self.drain()
        out, self.counts = self.counts, {name: 0 for name in self.counts}
        return out


def kit_of(ref: str, scratch: Path) -> Path:
    """The kit (launcher/) of git REF, unpacked under scratch; "." is this checkout's."""
    if ref == ".":
        return ROOT / "launcher"
    out = scratch / "before"
    out.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref, "launcher"],
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(out)], input=archive, check=True)
    return out / "launcher"


def files_under(top: Path) -> int:
    return sum(len(files) for _, _, files in os.walk(top)) if top.exists() else 0


def run(kit: Path, scratch: Path, period: int, seconds: float) -> Dict[str, object]:
    from launcher import __version__

    job = str(880000 + os.getpid() % 10000)
    cwd = scratch / "submit"
    cwd.mkdir()
    setup = (f'kit={kit}\nsource "$kit/node/job.sh" {__version__}\n'
             f'jsc_hangs_setup RANK\njsc_deadline_setup {period}\n'
             'printf "%s\\n%s\\n" "$hangs_dir" "${timeline_dir:-}"\n')
    env = {"PATH": os.environ["PATH"], "SLURM_JOB_ID": job}
    hangs_text, timeline_dir = subprocess.run(
        ["bash", "-euc", setup], cwd=cwd, env=env, capture_output=True, text=True,
        check=True).stdout.split("\n")[:2]
    hangs = Path(hangs_text)
    notify = Inotify(cwd)  # the submit directory: .hangs/JOBID, and .timeline/JOBID
    stop = scratch / "stop"
    (scratch / "rank.py").write_text(RANK)
    base = dict(os.environ, PYTHONPATH=str(kit / "task" / "hook"), TORCHRUN_JSC_STACKS=str(hangs),
                SLURM_JOB_ID=job, PYTHONDONTWRITEBYTECODE="1")
    base.pop("TORCHRUN_JSC_STACKS_PID", None)
    if timeline_dir:  # the kit's start-up timeline (issue 36): each rank's marks too
        base["TORCHRUN_JSC_TIMELINE"] = timeline_dir
    ranks: List[subprocess.Popen] = []
    t0 = time.monotonic()
    for rank in range(NODES * PER_NODE):
        env_r = dict(base, RANK=str(rank), LOCAL_RANK=str(rank % PER_NODE),
                     SLURMD_NODENAME=f"jwb{rank // PER_NODE:04d}")
        ranks.append(subprocess.Popen([sys.executable, str(scratch / "rank.py"), str(stop)],
                                      env=env_r))
    # Every rank has armed and written its first mark (its own, both layouts): start-up over.
    from launcher.node import stacks as new_stacks  # only to read either layout's count

    def marked() -> int:
        progress = hangs / "progress"
        names = [n for n in os.listdir(progress) if n != "period" and n != "watcher"]
        if names and names[0].startswith("rank-"):
            return len(names)
        return len(new_stacks.read_marks(str(hangs)))
    while marked() < NODES * PER_NODE:
        assert time.monotonic() - t0 < 600, f"only {marked()} ranks marked after 600 s"
        time.sleep(0.5)
    start_up = notify.take()
    start_s = time.monotonic() - t0
    watcher = subprocess.Popen([sys.executable, "-I", str(kit / "node" / "run.py"), "stacks",
                                "watch", job, str(hangs), "100000", str(period), "0", "--",
                                "true"], stdout=subprocess.DEVNULL)
    t1 = time.monotonic()
    time.sleep(seconds)  # the measured window: what the running job does to the directory
    steady = notify.take()
    window = time.monotonic() - t1
    stop.write_text("")
    for p in ranks:
        p.wait()
    during = files_under(hangs)
    after = subprocess.run(["bash", "-euc", f'kit={kit}\nsource "$kit/node/job.sh" {__version__}'
                            f'\nhangs_dir={hangs}\nlaunch_rc=0\njsc_watch_pid={watcher.pid}\n'
                            'jsc_after_launch'], cwd=cwd, env=env, capture_output=True, text=True)
    watcher.kill()
    watcher.wait()
    notify.drain()
    return {"start_up": start_up, "start_s": start_s, "steady": steady, "window": window,
            "files": during, "left": files_under(hangs), "after_rc": after.returncode,
            "timeline": files_under(Path(timeline_dir)) if timeline_dir else 0}


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.storage_bench")
    ap.add_argument("--before", default="main", help="git ref of the kit to compare with")
    ap.add_argument("--period", type=int, default=15,
                    help="the marks' period (64 nodes: launch.hang_timeout >= 152 s -> 15 s)")
    ap.add_argument("--seconds", type=float, default=60.0, help="the steady window")
    a = ap.parse_args()
    print(storage(a.before, a.period, a.seconds))
    return 0


def storage(before: str = "main", period: int = 15, seconds: float = 60.0) -> str:
    results = {}
    for name, ref in ((f"before ({before})", before), ("after (this checkout)", ".")):
        scratch = Path(tempfile.mkdtemp(prefix="storage-bench-"))
        try:
            print(f"storage: {name} ...", file=sys.stderr, flush=True)
            results[name] = run(kit_of(ref, scratch), scratch, period, seconds)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    rows = []
    for name, r in results.items():
        per_min = {k: v * 60.0 / r["window"] for k, v in r["steady"].items()}
        rows.append([name, str(r["start_up"]["create"]), str(r["start_up"]["open"]),
                     f"{r['start_s']:.0f} s", f"{per_min['create']:.0f}",
                     f"{per_min['open']:.0f}", f"{per_min['list']:.0f}",
                     f"{per_min['write']:.0f}", f"{per_min['read']:.0f}", str(r["files"]),
                     str(r["left"]), str(r["timeline"])])
    from bench.stats import table

    head = (f"{NODES} nodes x {PER_NODE} ranks (plain Python ranks through the kit's hook, "
            f"progress 10/s), marks every {period} s, the watcher beside them; inotify counts "
            f"under the submit directory.\n\n")
    return head + table(["kit", "start-up: files created", "start-up: opens", "start-up took",
                         "per min: created", "per min: opens", "per min: listings",
                         "per min: writes", "per min: reads", "files while running",
                         "files after the job", "timeline files (kept)"], rows)


if __name__ == "__main__":
    sys.exit(main())
