"""Every rank's Python stack, grouped: ``jsc-compose stacks JOBID`` and the jobscript's last word.

Where it sits: launcher.task.hook.sitecustomize (armed in every rank at start-up) -> **stacks**: ``node``
runs once per node (an ``srun --overlap`` step, or the jobscript's own step before the job
is killed) and signals the job's armed ranks on that node, waits for their dumps and prints
one JSON line per rank; ``report`` reads those lines from every node and prints the ranks
grouped by stack, the odd one out last::

    stacks: 7 ranks in all_reduce at train.py:42; rank 3 on jwb0002 in load_batch at data.py:17

``watch`` (jobs with launch.hang_timeout) runs beside the launch in the batch shell: it reads
the ranks' progress marks (written by the hook) and, once no rank made progress for the
timeout, collects and prints the stacks, names the rank that is behind in one line (into the
file ``no-progress``, which the jobscript prints last) and ends the job's steps; with
launch.hang_action replace the spares' supervisor runs it (launcher/node/spares.py) and is
asked first whether it replaces the nodes behind.

Standard library only, Python >= 3.6, run from the kit on a node, outside any container
(``python3 -I "$kit/node/run.py" stacks ...``: the ranks' processes are visible from the
host), and imported by the CLI and the tests. No launcher imports.
"""

import glob
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

DIR_ENV = "TORCHRUN_JSC_STACKS"  # as in launcher/task/hook/sitecustomize.py
SIGNAL = signal.SIGURG  # default action: ignored, so unarmed processes are not disturbed
WAIT_S = 10.0  # how long a node waits for its ranks' dumps
_HEADER = re.compile(r"# jsc-stacks (.*)")
_THREAD = re.compile(r"(Current thread|Thread) (0x[0-9a-fA-F]+)")
_FRAME = re.compile(r'\s+File "(.*)", line (\d+|\?\?\?) in (.*)')
_LIBRARY = ("/site-packages/", "/dist-packages/", "<frozen ")
_STDLIB = re.compile(r"/lib/python\d+(\.\d+)?/")
_MARK = re.compile(r"rank=(\d+) world=(\d+) all=(\d+) calls=(\d+) t=([\d.]+) "
                   r"state=(run|done)\s*\Z")
_DUMP = re.compile(r"jsc-stacks\.([^./\s]+)\.(\d+)(?:[.\s]|\Z)")  # hook: DUMP_PREFIX
MARKS_PREFIX = "marks."  # progress/marks.NODE (hook: MARKS_PREFIX)
MARK_WIDTH = 128  # one rank's slot in it (hook: MARK_WIDTH)
VERDICT = "no-progress"  # under the job's directory: the watcher's one line
COLLECT_S = 300  # the watcher's limit for the stack collection of every node

# A time in a log line: the node's local time with its zone, to the second (what Slurm's own
# records show), e.g. 2026-11-27 13:03:41 CET. launcher/node/job.sh jsc_now writes the same.
TIME_FORMAT = "%Y-%m-%d %H:%M:%S %Z"


def time_text(t):
    """``t`` (seconds since the epoch) as the kit writes a time in a log line."""
    return time.strftime(TIME_FORMAT, time.localtime(t))


# --- the node side -------------------------------------------------------------------------

def _environ(pid, proc):
    try:
        with open(os.path.join(proc, pid, "environ"), "rb") as f:
            raw = f.read()
    except OSError:
        return {}
    out = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            out[key.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
    return out


def _status(pid, proc):
    """(innermost pid: the one the process itself sees, e.g. in a container, state letter)."""
    inner, state = int(pid), "?"
    try:
        with open(os.path.join(proc, pid, "status")) as f:
            for line in f:
                if line.startswith("NSpid:"):
                    inner = int(line.split()[-1])
                elif line.startswith("State:"):
                    state = line.split()[1]
    except (OSError, ValueError, IndexError):
        pass
    return inner, state


def _dump_fd(pid, inner, host, proc):
    """The path (/proc/PID/fd/N) of the armed process's dump file: the descriptor whose target
    is named DUMP_PREFIX.HOST.INNER (hook: _dump_file), INNER the pid the process sees (in its
    container); a forked child holds its parent's, whose pid is not its own. None if none."""
    folder = os.path.join(proc, pid, "fd")
    try:
        fds = os.listdir(folder)
    except OSError:
        return None
    for fd in fds:
        try:
            target = os.readlink(os.path.join(folder, fd))
        except OSError:
            continue
        match = _DUMP.search(target)
        if match and match.group(1) == host and int(match.group(2)) == inner:
            return os.path.join(folder, fd)
    return None


def armed(job_id, proc="/proc"):
    """(pid, dump file, state) for each armed rank of job ``job_id`` (None: any job) here.

    "Here" is this node: a process whose SLURMD_NODENAME names another node is left alone.
    On a real node /proc holds only its own processes anyway; where several Slurm nodes share
    one kernel (the lab's nodes, a multi-slurmd test set-up) each collector would otherwise
    signal and report every node's ranks. The dump file is node-local and has no name on any
    file system: the rank's anonymous file, reached through /proc/PID/fd (the hook names it
    after this host and the process's own pid, the one it sees in its container; without
    SLURMD_NODENAME the host tells the nodes apart)."""
    out = []
    node = os.environ.get("SLURMD_NODENAME")
    host = socket.gethostname().split(".")[0]  # as the hook names its file
    for pid in os.listdir(proc):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        env = _environ(pid, proc)
        directory = env.get(DIR_ENV)
        if not directory or (job_id is not None and env.get("SLURM_JOB_ID") != str(job_id)):
            continue
        if node and env.get("SLURMD_NODENAME", node) != node:
            continue
        inner, state = _status(pid, proc)
        path = _dump_fd(pid, inner, host, proc)
        if path:
            out.append((int(pid), path, state))
    return sorted(out)


def _header(path):
    try:
        with open(path, errors="replace") as f:
            match = _HEADER.match(f.readline())
    except OSError:
        return {}
    fields = {}
    for item in (match.group(1).split(" argv=", 1)[0].split() if match else []):
        key, _, value = item.partition("=")
        fields[key] = value
    if match and " argv=" in match.group(1):
        fields["argv"] = match.group(1).split(" argv=", 1)[1]
    return fields


def _size(path):
    try:
        return os.path.getsize(path)
    except OSError:
        return -1


def collect(job_id, wait_s=WAIT_S, proc="/proc", poll_s=0.1):
    """Signal this node's armed ranks of the job, wait for each dump; one dict per rank."""
    targets = armed(job_id, proc)
    start = {pid: _size(path) for pid, path, _ in targets}
    for pid, _, _ in targets:
        try:
            os.kill(pid, SIGNAL)
        except OSError:
            pass
    last = dict(start)
    done = {}
    deadline = time.monotonic() + wait_s
    while len(done) < len(targets) and time.monotonic() < deadline:
        time.sleep(poll_s)
        for pid, path, _ in targets:
            size = _size(path)
            if pid not in done and size > start[pid] and size == last[pid]:
                done[pid] = size  # grew, and did not grow since the last look: complete
            last[pid] = size
    out = []
    host = socket.gethostname().split(".")[0]
    for pid, path, state in targets:
        head = _header(path)
        dump = None
        if pid in done or _size(path) > start[pid]:
            with open(path, "rb") as f:
                f.seek(start[pid])
                dump = f.read().decode("utf-8", "replace")
        out.append({"host": head.get("host", host), "pid": pid, "rank": head.get("rank"),
                    "local_rank": head.get("local_rank"), "main": head.get("main"),
                    "argv": head.get("argv", ""), "state": _status(str(pid), proc)[1]
                    if os.path.isdir(os.path.join(proc, str(pid))) else "gone",
                    "dump": dump})
    return out


# --- the report side -----------------------------------------------------------------------

def threads(dump):
    """[(thread id, [(file, line, function), ...] innermost first)] of one faulthandler dump."""
    out = []
    for line in (dump or "").splitlines():
        match = _THREAD.match(line)
        if match:
            out.append((int(match.group(2), 16), []))
            continue
        match = _FRAME.match(line)
        if match and out:
            out[-1][1].append((match.group(1), match.group(2), match.group(3)))
    return out


def main_stack(record):
    """The main thread's frames (by the id the hook wrote; else the oldest thread: the last)."""
    found = threads(record.get("dump"))
    if not found:
        return []
    main = record.get("main")
    for ident, frames in found:
        if main is not None and str(ident) == str(main):
            return frames
    return found[-1][1]


def library(path):
    return any(part in path for part in _LIBRARY) or bool(_STDLIB.search(path))


def where(frames):
    """'all_reduce at train.py:42': the innermost function, and the innermost frame of the
    program's own code (not the standard library or site-packages) that led there."""
    if not frames:
        return "no Python frame"
    func = frames[0][2]
    own = next((f for f in frames if not library(f[0])), frames[0])
    return "%s at %s:%s" % (func, os.path.basename(own[0]), own[1])


def ranges(numbers):
    """[0, 1, 2, 4, 7, 8] -> '0-2,4,7-8'."""
    out, run = [], []
    for n in sorted(numbers):
        if run and n == run[-1] + 1:
            run.append(n)
            continue
        if run:
            out.append(str(run[0]) if len(run) == 1 else "%d-%d" % (run[0], run[-1]))
        run = [n]
    if run:
        out.append(str(run[0]) if len(run) == 1 else "%d-%d" % (run[0], run[-1]))
    return ",".join(out)


def _rank(record):
    try:
        return int(record.get("rank"))
    except (TypeError, ValueError):
        return -1


def group(records):
    """[(frames or None, [records])]: ranks with the same main-thread stack together, the
    biggest group first; ranks without a dump in one group (None) at the very end."""
    groups = {}
    for record in records:
        key = tuple(main_stack(record)) if record.get("dump") else None
        groups.setdefault(key, []).append(record)
    ordered = sorted(((k, v) for k, v in groups.items() if k is not None),
                     key=lambda kv: (-len(kv[1]), min(_rank(r) for r in kv[1])))
    if None in groups:
        ordered.append((None, groups[None]))
    return [(None if k is None else list(k), sorted(v, key=_rank)) for k, v in ordered]


def who(members):
    """'rank 3 on jwb0002' or '7 ranks (0-2,4-7 on jwb0001, jwb0002)'."""
    hosts = sorted({r.get("host", "?") for r in members})
    if len(members) == 1:
        return "rank %s on %s" % (members[0].get("rank"), hosts[0])
    return "%d ranks (%s on %s)" % (len(members), ranges(_rank(r) for r in members),
                                   ", ".join(hosts))


def _phrase(frames, members):
    if frames is None:
        states = sorted({r.get("state", "?") for r in members})
        return "%s: no stack (process state %s)" % (who(members), "/".join(states))
    if len(members) == 1:
        return "%s in %s" % (who(members), where(frames))
    return "%d ranks in %s" % (len(members), where(frames))


def report(records, job_id=None):
    """The text: one summary line, then each group's ranks and main-thread stack."""
    if not records:
        return ("stacks: no armed rank found%s (is it a job the kit started, rendered by "
                "this version, and still running?)\n" % (" in job %s" % job_id if job_id else ""))
    groups = group(records)
    hosts = {r.get("host") for r in records}
    lines = ["stacks: " + "; ".join(_phrase(f, m) for f, m in groups)]
    lines.append("%d rank%s on %d node%s%s, %d different stack%s" % (
        len(records), "s" if len(records) != 1 else "", len(hosts),
        "s" if len(hosts) != 1 else "", " of job %s" % job_id if job_id else "",
        len([g for g in groups if g[0] is not None]),
        "s" if len([g for g in groups if g[0] is not None]) != 1 else ""))
    for frames, members in groups:
        if frames is None:
            continue
        lines.append("")
        lines.append("== %s in %s" % (who(members), where(frames)))
        for path, line, func in frames:
            lines.append('    File "%s", line %s in %s' % (path, line, func))
        others = len(threads(members[0].get("dump"))) - 1
        if others > 0:
            lines.append("    (+ %d other thread%s in rank %s's dump)" % (
                others, "s" if others != 1 else "", members[0].get("rank")))
    missing = [m for f, m in groups if f is None]
    for members in missing:
        lines.append("")
        lines.append("== " + _phrase(None, members) + ": blocked in the kernel (D), "
                     "stopped, or gone before it could answer")
    return "\n".join(lines) + "\n"


# --- the progress deadline -----------------------------------------------------------------

def read_slots(directory):
    """{(file name, slot): bytes} of every node's mark file ``directory/progress/marks.NODE``
    (one read per node; each file is opened, so an NFS client asks the server, not its
    attribute cache). Empty slots (a rank not there) are left out."""
    out = {}
    pattern = os.path.join(glob.escape(directory), "progress", glob.escape(MARKS_PREFIX) + "*")
    for path in glob.glob(pattern):
        try:
            fd = os.open(path, os.O_RDONLY)
            try:
                chunks = []
                while True:
                    chunk = os.read(fd, 1 << 16)
                    if not chunk:
                        break
                    chunks.append(chunk)
            finally:
                os.close(fd)
        except OSError:
            continue
        data, name = b"".join(chunks), os.path.basename(path)
        for offset in range(0, len(data), MARK_WIDTH):
            raw = data[offset:offset + MARK_WIDTH]
            if raw.strip(b"\0 \n"):
                out[(name, offset // MARK_WIDTH)] = raw
    return out


def parse_mark(raw):
    """(rank, {"world", "all", "calls", "t", "done"}) of one slot, or None (caught while it
    was rewritten, or not a mark)."""
    match = _MARK.match(raw.decode("ascii", "replace"))
    if not match:
        return None
    return int(match.group(1)), {"world": int(match.group(2)), "all": int(match.group(3)),
                                 "calls": int(match.group(4)), "t": float(match.group(5)),
                                 "done": match.group(6) == "done"}


def marks_of(slots, since=0.0):
    """{rank: mark} from ``read_slots``; marks stamped before ``since`` (an earlier attempt of
    a requeued job) are left out. A slot caught while it is rewritten counts as a rank not
    started yet (keyed "FILE:SLOT"): it holds the clock for this look, as no other time (the
    file's mtime, say) can stand in for the one the rank stamped."""
    out = {}
    for (name, slot), raw in sorted(slots.items()):
        parsed = parse_mark(raw)
        if parsed is None:
            out["%s:%d" % (name, slot)] = {"world": None, "all": None, "calls": None,
                                           "t": since, "done": False}
        elif parsed[1]["t"] >= since:
            out[parsed[0]] = parsed[1]
    return out


def read_marks(directory, since=0.0):
    """{rank: {"world", "all", "calls", "t", "done"}} of every node's mark file."""
    return marks_of(read_slots(directory), since)


def late_marks(slots, before, last_look, tolerance):
    """{rank: seconds late} of the marks that changed since the look at ``last_look`` (which
    read ``before``) but were stamped more than ``tolerance`` s before it: their write reached the
    file late (storage held it up), so the time since their stamp says nothing about
    progress."""
    out = {}
    for key, raw in slots.items():
        if raw == before.get(key):
            continue
        parsed = parse_mark(raw)
        if parsed is not None and parsed[1]["t"] < last_look - tolerance:
            out[parsed[0]] = last_look - parsed[1]["t"]
    return out


def started(mark):
    """Has this rank made its first progress (a collective issued, launcher.progress()
    called) or finished? A mark that could not be read says nothing: not yet."""
    return mark["done"] or any(mark[k] for k in ("world", "all", "calls"))


def overdue(marks, now, timeout, counted_from=None):
    """Seconds since any rank last made progress, when that is at least ``timeout``; else
    None. The clock runs only once every rank that reported has made its first progress and
    while some rank still runs: start-up (imports, model, checkpoint, compilation before the
    first collective) never counts, and a rank that never reaches its first collective is
    left to torch's collective timeout (docs/guide/hangs.md). ``counted_from``: the end of the
    last storage stall the watcher saw; time before it does not count (a mark held up in a
    stall carries its old time)."""
    if not marks or all(m["done"] for m in marks.values()):
        return None
    if not all(started(m) for m in marks.values()):
        return None
    last = max(m["t"] for m in marks.values())
    idle = now - max(last, counted_from if counted_from is not None else last)
    return idle if idle >= timeout else None


def stall_s(period, timeout):
    """How late a look or a mark may come before the watcher calls it a storage stall: a
    period, at least 10 s, and at most half the deadline (a stall any longer could end it)."""
    return min(max(10.0, float(period)), timeout / 2.0)


def _probe(directory, now):
    """The watcher's own small write beside the marks, as a rank writes its mark: when storage
    holds writes up, it holds this look up too, which the watcher then sees as a late look."""
    try:
        fd = os.open(os.path.join(directory, "progress", "watcher"), os.O_WRONLY | os.O_CREAT,
                     0o644)
        try:
            os.pwrite(fd, ("t=%.3f" % now).ljust(MARK_WIDTH - 1).encode() + b"\n", 0)
        finally:
            os.close(fd)
    except OSError:
        pass


def _plural(n, word):
    return "%d %s%s" % (n, word, "" if n == 1 else "s")


def behind(marks):
    """The ranks behind: the running ranks that issued the fewest collectives of the default
    group (every rank takes part in each of them, so the ones with fewer never arrived),
    sorted; [] when every running rank issued as many (they wait in one together)."""
    running = {r: m for r, m in marks.items() if not m["done"]}
    counts = [m["world"] for m in running.values() if m["world"] is not None]
    if not counts or min(counts) == max(counts):
        return []
    return sorted(r for r, m in running.items() if m["world"] == min(counts))


def rank_nodes(slots, since=0.0):
    """{rank: node} from ``read_slots``: the node whose mark file (marks.NODE, the hook names
    it after SLURMD_NODENAME) holds the rank's newest mark stamped at or after ``since`` (a
    rank whose node was replaced has its older mark in the old node's file)."""
    newest = {}
    for (name, _), raw in slots.items():
        parsed = parse_mark(raw)
        if parsed is None or parsed[1]["t"] < since or not name.startswith(MARKS_PREFIX):
            continue
        rank, mark = parsed
        if rank not in newest or mark["t"] > newest[rank][0]:
            newest[rank] = (mark["t"], name[len(MARKS_PREFIX):])
    return {rank: node for rank, (_, node) in newest.items()}


def verdict(records, marks, timeout, ending="job ended"):
    """The one line: who is behind, where. Behind: :func:`behind`; when all issued as many,
    the odd one out of the stacks. ``ending``: what follows (nothing when empty)."""
    running = {r: m for r, m in marks.items() if not m["done"]}
    counts = [m["world"] for m in running.values() if m["world"] is not None]
    by_rank = {_rank(r): r for r in records}
    late = behind(marks)
    if late:
        low = min(counts)
        members = [by_rank.get(r, {"rank": str(r), "host": "?", "dump": None, "state": "?"})
                   for r in late]
        phrases = [_phrase(f, m) for f, m in group(members)]
        text = "; ".join(phrases[:3]) + ("; and %d more" % (len(phrases) - 3)
                                          if len(phrases) > 3 else "")
        text += ", %s behind the other %d" % (_plural(max(counts) - low, "collective"),
                                              len(running) - len(late))
    elif records:
        groups = group(records)
        text = _phrase(*groups[-1])  # the odd one out: the smallest group, listed last
        if len(groups) == 1 and len(records) > 1:
            text = "all " + text
    else:
        text = "no rank answered the stack request"
    return "no progress for %d s: %s%s" % (timeout, text, "; " + ending if ending else "")


def job_steps(job_id, squeue_lines):
    """The job's own steps from ``squeue -h -s -j JOBID -o %i`` lines ("5.0", "5.1"): not
    the batch, extern or interactive step, nor another job's."""
    prefix = "%s." % job_id
    return [line.strip() for line in squeue_lines
            if line.strip().startswith(prefix) and line.strip()[len(prefix):].isdigit()]


def _scancel(args):
    try:  # a controller that does not answer must not hold the watcher for ever
        subprocess.call(["scancel"] + args, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        print("watch: scancel: %s" % exc, file=sys.stderr)


def _stop(job_id, kill_after, sleep):
    """SIGTERM to every step of the job (scancel --signal without a step: the steps, not the
    batch shell), then, ``kill_after`` s later, SIGKILL to each step still there by its step
    id: SIGKILL sent to the job id cancels the job (state CANCELLED, not FAILED with 124)."""
    _scancel(["--signal=TERM", str(job_id)])
    sleep(kill_after)
    steps = list_steps(job_id)
    if steps:
        _scancel(["--signal=KILL"] + steps)


def list_steps(job_id):
    """The job's running steps, by one squeue (none when squeue fails: nothing is killed)."""
    try:
        listed = subprocess.run(["squeue", "-h", "-s", "-j", str(job_id), "-o", "%i"],
                                stdout=subprocess.PIPE, universal_newlines=True,
                                timeout=60).stdout.splitlines()
    except (OSError, subprocess.SubprocessError) as exc:
        print("watch: squeue: %s" % exc, file=sys.stderr)
        return []
    return job_steps(job_id, listed)


def _starting_note(job_id, timeout, waiting):
    if not waiting:
        return ("job %s: launch.hang_timeout: no rank has reported after %d s (still "
                "starting, or no rank runs the kit's hook: docs/guide/hangs.md)\n"
                % (job_id, timeout))
    return ("job %s: launch.hang_timeout: %s %s issued no collective after %d s; the "
            "deadline starts once every rank has (docs/guide/hangs.md)\n"
            % (job_id, "rank" if len(waiting) == 1 else "ranks", ranges(waiting), timeout))


def _stall_note(job_id, directory, late, behind):
    if late:
        worst = max(late.values())
        what = "the marks of %s %s reached %s up to %d s after the ranks wrote them" % (
            "rank" if len(late) == 1 else "ranks", ranges(late), directory, worst)
    else:
        what = "the watcher's look at %s came %d s late (its own write or read there was " \
            "held up)" % (directory, behind)
    return ("job %s: launch.hang_timeout: storage stalled: %s; time in a stall is not counted "
            "as no progress: the deadline counts from now (docs/guide/hangs.md)\n"
            % (job_id, what))


def _until_overdue(job_id, directory, timeout, period, clock, sleep, out, start, since):
    """Look every ``period`` s until no rank made progress for ``timeout`` s since ``start``
    (moved on to ``since()`` when that is later: the supervisor replaced a node there).
    Returns (seconds without progress, the start the marks were read from)."""
    noted = False
    slots, last_look, counted_from, stalled = None, clock(), start, False
    tolerance = stall_s(period, timeout)
    while True:
        sleep(period)
        moved = since() if since is not None else None
        if moved is not None and moved > start:  # a new round: its marks only, the clock anew
            start, noted = moved, False
            counted_from = max(counted_from, start)
        _probe(directory, clock())
        before, slots = slots, read_slots(directory)
        now = clock()
        marks = marks_of(slots, since=start)
        late = {} if before is None else late_marks(slots, before, last_look, tolerance)
        behind_s = now - last_look - period  # this look came that late: blocked, or not run
        if late or behind_s > tolerance:
            counted_from = now
            if not stalled:
                out.write(_stall_note(job_id, directory, late, behind_s))
                out.flush()
        stalled = bool(late) or behind_s > tolerance
        last_look = now
        idle = overdue(marks, now, timeout, counted_from)
        if idle is not None:
            return idle, start
        if not noted and now - start >= timeout:
            waiting = sorted(r for r, m in marks.items() if not started(m) and
                             isinstance(r, int))
            if not marks or waiting:
                noted = True
                out.write(_starting_note(job_id, timeout, waiting))
                out.flush()


def _collect(collector):
    """The stack records of every node that answered (``collector``: the per-node step's
    argv, or a function that returns it now: the spares' supervisor leaves retired nodes out)."""
    if callable(collector):
        collector = collector()
    try:
        lines = subprocess.run(collector, stdout=subprocess.PIPE, universal_newlines=True,
                               timeout=COLLECT_S).stdout.splitlines()
    except subprocess.TimeoutExpired as exc:  # the nodes that answered still count
        print("watch: %s" % exc, file=sys.stderr)
        lines = child_output(exc.output).splitlines()
    except (OSError, subprocess.SubprocessError) as exc:
        print("watch: %s" % exc, file=sys.stderr)
        lines = []
    return read_records(lines)


def watch(job_id, directory, timeout, period, kill_after, collector, clock=time.time,
          sleep=time.sleep, out=None, on_hang=None, since=None):
    """Until no rank made progress for ``timeout`` s (checked every ``period`` s): then the
    stacks (``collector``: argv printing JSON lines, the per-node step, or a function
    returning it at each use), the verdict into
    ``directory/no-progress``, and the job's steps ended (SIGKILL ``kill_after`` s after
    SIGTERM). Returns 0; the jobscript kills this process when the launch ends first.

    ``on_hang(nodes, idle, line)`` (launch.hang_action replace: the spares' supervisor,
    launcher/node/spares.py), called after the stacks with the nodes of the ranks behind
    (sorted; [] when no rank is behind the others) and the verdict's text: None when it
    replaced them (the deadline starts again, from then: the new workers' start-up does not
    count, as at the job's start), else why not, in a few words (the job ends as without
    it). ``since()``: a later start for the deadline (the supervisor's last replacement)."""
    out = out or sys.stdout
    start = clock()
    while True:
        idle, start = _until_overdue(job_id, directory, timeout, period, clock, sleep, out,
                                     start, since)
        out.write("job %s: no progress for %d s (launch.hang_timeout %d) at %s: every rank's "
                  "stack (jsc-compose stacks)\n" % (job_id, idle, timeout, time_text(clock())))
        out.flush()
        records = _collect(collector)
        out.write(report(records, job_id))
        out.flush()
        slots = read_slots(directory)
        marks = marks_of(slots, since=start)
        if on_hang is None:
            break
        nodes_of = rank_nodes(slots, since=start)
        nodes = sorted({nodes_of[r] for r in behind(marks) if r in nodes_of})
        text = verdict(records, marks, timeout, ending="")
        out.write("job %s: %s\n" % (job_id, text))
        out.flush()
        why = on_hang(nodes, idle, text)
        if why is None:
            start = clock()
            continue
        out.write("job %s: launch.hang_action replace: %s: the job ends\n" % (job_id, why))
        out.flush()
        break
    line = verdict(records, marks, timeout)
    tmp = os.path.join(directory, VERDICT + ".tmp")
    with open(tmp, "w") as f:
        f.write(line + "\n")
    os.replace(tmp, os.path.join(directory, VERDICT))
    _stop(job_id, kill_after, sleep)
    return 0


def child_output(output):
    """What a timed-out child wrote, as text: TimeoutExpired carries bytes even under
    universal_newlines (the subprocess docs say so), or None."""
    if isinstance(output, bytes):
        return output.decode("utf-8", "replace")
    return output or ""


def read_records(lines):
    out = []
    for line in lines:
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def main(argv):
    """``node JOBID [WAIT_S]``: this node's ranks as JSON lines; ``report [JOBID]``: group the
    lines on stdin; ``watch JOBID DIR TIMEOUT_S PERIOD_S KILL_AFTER_S -- COLLECTOR...``: the
    progress deadline."""
    if argv[:1] == ["node"] and len(argv) in (2, 3):
        job = None if argv[1] in ("", "-") else argv[1]
        for record in collect(job, float(argv[2]) if len(argv) == 3 else WAIT_S):
            print(json.dumps(record, sort_keys=True))
        return 0
    if argv[:1] == ["report"] and len(argv) in (1, 2):
        sys.stdout.write(report(read_records(sys.stdin), argv[1] if len(argv) == 2 else None))
        return 0
    if argv[:1] == ["watch"] and len(argv) > 7 and argv[6] == "--":
        return watch(argv[1], argv[2], float(argv[3]), float(argv[4]), float(argv[5]),
                     argv[7:])
    print("usage: stacks node JOBID [WAIT_S] | stacks report [JOBID] | "
          "stacks watch JOBID DIR TIMEOUT_S PERIOD_S KILL_AFTER_S -- COLLECTOR...",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
