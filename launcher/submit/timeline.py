"""``jsc-compose timeline JOBID``: when each node of a job passed each phase of its start-up.

Where it sits: the job writes the marks, one line ``TIME PHASE [WHO]`` appended per mark to
``.timeline/JOBID/NODE`` under the submit directory (one file per node while the job runs,
folded into ``.timeline/JOBID.marks`` after its launch; docs/guide/timeline.md):
the batch script (launcher/node/job.sh ``jsc_mark``: batch_start, step_start, launch_end), each
task's prelude in its container (launcher/task/hook.sh: container_up), torchrun_jsc
(launcher/task/torchrun_jsc/phases.py: decided, rendezvous_done) and every rank's hook
(launcher/task/hook/sitecustomize.py ``phase``: workers_started, process_group_up,
first_collective), and with job.spare_nodes the supervisor on the batch host
(launcher/node/spares.py: node_lost, spare_started). **This** reads them (a finished job's, or a running one's so far), prints one
line per node and phase, names the slowest node and the slowest phase, and draws the same as
an SVG (one row per node, a bar per phase) that a browser opens. launcher.cli turns its
SpecError (bad arguments, exit 2) and SubmitError (no marks, exit 1) into one line.
"""

from __future__ import annotations

import html
import os
import re
import statistics
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from launcher.model import SpecError
from launcher.model import SubmitError
from launcher.submit.output import write_file

FOLDER = ".timeline"  # under the submit directory (launcher/node/job.sh jsc_timeline_setup)
MARKS = ".marks"  # FOLDER/JOBID + this: the nodes' marks folded into one file after the launch
# The batch script's own marks: once per job, on the batch host's file.
JOB_PHASES = (("batch_start", "batch start"), ("step_start", "step start"))
# Each node's, in the order they happen (a mode without torchrun_jsc has no decided and no
# rendezvous_done; srun mode's tasks are its ranks).
NODE_PHASES = (("container_up", "container up"), ("decided", "torchrun_jsc decided"),
               ("rendezvous_done", "rendezvous done"), ("workers_started", "workers started"),
               ("process_group_up", "process group up"),
               ("first_collective", "first collective"))
END = "launch_end"
# A recovery (job.spare_nodes): the supervisor's verdict on a node, the spare's step started.
# The node phases marked after a loss (the re-rendezvous, the workers restarted) are that
# recovery's, not the start-up's.
LOST, SPARE = "node_lost", "spare_started"
NAMES = dict(JOB_PHASES + NODE_PHASES + ((END, "launch end"), (LOST, "node lost"),
                                         (SPARE, "spare started")))
# One colour per phase, told apart in print and by colour-blind readers (Okabe-Ito).
COLOURS = {"batch": "#bbbbbb", "container_up": "#e69f00", "decided": "#56b4e9",
           "rendezvous_done": "#009e73", "workers_started": "#f0e442",
           "process_group_up": "#0072b2", "first_collective": "#d55e00"}


@dataclass
class Recovery:
    """One lost node (job.spare_nodes) and what every node did from then on, until the next."""
    at: float  # when the supervisor declared the node lost
    lost: str
    spare: Optional[str] = None
    spare_at: Optional[float] = None
    nodes: Dict[str, Dict[str, float]] = field(default_factory=dict)  # as Timeline.nodes

    def steps(self, node: str, origin: float) -> List[Tuple[str, float, float]]:
        """(phase, start, end) of each phase the node passed again, relative to the origin,
        the first from the loss."""
        return _spans(self.nodes.get(node, {}), self.at, origin)


def _spans(marks: Dict[str, float], before: float, origin: float) -> List[Tuple[str, float, float]]:
    out = []
    for phase, _ in NODE_PHASES:
        at = marks.get(phase)
        if at is None:
            continue
        out.append((phase, before - origin, at - origin))
        before = max(before, at)
    return out


@dataclass
class Timeline:
    job: str
    folder: Path
    job_marks: Dict[str, float] = field(default_factory=dict)  # phase -> time
    batch_node: Optional[str] = None
    # node -> phase -> time: the latest of the node's processes' first marks of the phase
    nodes: Dict[str, Dict[str, float]] = field(default_factory=dict)
    counts: Dict[str, Dict[str, int]] = field(default_factory=dict)  # how many processes
    end: Optional[float] = None
    recoveries: List[Recovery] = field(default_factory=list)

    @property
    def origin(self) -> float:
        """Time 0: the batch script's start, else the earliest mark."""
        if "batch_start" in self.job_marks:
            return self.job_marks["batch_start"]
        times = [t for marks in self.nodes.values() for t in marks.values()]
        return min(times + list(self.job_marks.values()))

    def steps(self, node: str) -> List[Tuple[str, float, float]]:
        """(phase, start, end) of each phase the node reached, relative to the origin: a phase
        runs from the one before it (the step's start for the first) to its own mark."""
        origin = self.origin
        before = self.job_marks.get("step_start", self.job_marks.get("batch_start", origin))
        return _spans(self.nodes.get(node, {}), before, origin)


def parse_line(line: str) -> Optional[Tuple[float, str, str]]:
    """(time, phase, who) of one mark, or None (a line cut short while it was written)."""
    parts = line.split()
    if len(parts) not in (2, 3) or parts[1] not in NAMES:
        return None
    try:
        t = float(parts[0])
    except ValueError:
        return None
    return t, parts[1], parts[2] if len(parts) == 3 else ""


def node_lines(folder: Path) -> List[Tuple[str, str]]:
    """(node, line) of every mark: from the folder's file per node while the job runs, else
    from the one file they were folded into after the launch (FOLDER/JOBID.marks, lines
    "NODE TIME PHASE [WHO]"; launcher/node/job.sh jsc_timeline_fold)."""
    out: List[Tuple[str, str]] = []
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        names = []
    for node in names:
        try:
            text = (folder / node).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        out += [(node, line) for line in text.splitlines()]
    if names:
        return out
    try:
        text = folder.with_name(folder.name + MARKS).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return out
    for line in text.splitlines():
        node, _, rest = line.partition(" ")
        out.append((node, rest))
    return out


def read(job: str, submit_dir: str = ".") -> Timeline:
    folder = Path(submit_dir) / FOLDER / job
    tl = Timeline(job, folder)
    node_marks: List[Tuple[str, float, str, str]] = []  # (node, time, phase, who)
    for node, line in node_lines(folder):
        mark = parse_line(line)
        if mark is None:
            continue
        t, phase, who = mark
        if phase in dict(JOB_PHASES):
            if phase not in tl.job_marks:
                tl.job_marks[phase] = t
                tl.batch_node = node
        elif phase == END:
            tl.end = t
        elif phase == LOST:
            tl.recoveries.append(Recovery(t, who))
        else:  # a node's phase, or the spare the supervisor started
            node_marks.append((node, t, phase, who))
    tl.recoveries.sort(key=lambda r: r.at)
    # Each node's phases: per round (the start-up, then each recovery) and process (WHO),
    # the first mark; per node the latest of its processes' (the node is there when all are).
    first: Dict[Tuple[int, str, str, str], float] = {}
    starts = [r.at for r in tl.recoveries]
    for node, t, phase, who in sorted(node_marks, key=lambda m: m[1]):
        round_ = sum(1 for at in starts if at <= t)  # 0: the start-up
        if phase == SPARE:
            rec = tl.recoveries[round_ - 1] if round_ else None
            if rec is not None and rec.spare is None:
                rec.spare, rec.spare_at = who, t
            continue
        first.setdefault((round_, node, phase, who), t)
    for (round_, node, phase, _), t in first.items():
        nodes = tl.recoveries[round_ - 1].nodes if round_ else tl.nodes
        marks = nodes.setdefault(node, {})
        marks[phase] = max(marks.get(phase, t), t)
        if not round_:
            counts = tl.counts.setdefault(node, {})
            counts[phase] = counts.get(phase, 0) + 1
    if not tl.job_marks and not tl.nodes:
        raise SubmitError(f"timeline: no marks of job {job} in {folder} (run it in the job's "
                          "submit directory or give --dir; jobs rendered by an older kit write "
                          "none)")
    return tl


def _reached(tl: Timeline, node: str) -> Tuple[int, float]:
    """How far a node got: (index of its last phase, when)."""
    order = [p for p, _ in NODE_PHASES]
    marks = tl.nodes.get(node, {})
    last = max((order.index(p) for p in marks), default=-1)
    return last, (marks[order[last]] - tl.origin) if last >= 0 else 0.0


def slowest_node(tl: Timeline) -> Optional[str]:
    """The node that got least far, and of those the one that got there last."""
    if not tl.nodes:
        return None
    return max(tl.nodes, key=lambda n: (-_reached(tl, n)[0], _reached(tl, n)[1], n))


def slowest_phase(tl: Timeline) -> Optional[Tuple[str, str, float]]:
    """(node, phase, seconds) of the longest phase of any node."""
    found = [(end - start, node, phase) for node in tl.nodes for phase, start, end in
             tl.steps(node)]
    if not found:
        return None
    took, node, phase = max(found, key=lambda f: (f[0], f[1]))
    return node, phase, took


def _s(seconds: float) -> str:
    return f"{seconds:.2f} s"


def report(tl: Timeline, svg: Optional[str] = None) -> str:
    origin = tl.origin
    nodes = sorted(tl.nodes)
    head = f"timeline of job {tl.job}: {len(nodes)} node{'s' if len(nodes) != 1 else ''}"
    if "batch_start" in tl.job_marks:
        started = time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(origin))
        head += f", batch script started {started} on {tl.batch_node}"
    head += (f", launch ended after {_s(tl.end - origin)}" if tl.end is not None
             else ", no launch end yet (running, or ended before the batch script's last word)")
    width = max([len("node")] + [len(n) for n in nodes] + [len(tl.batch_node or "")] +
                [len(n) for r in tl.recoveries for n in r.nodes])
    lines = [head, f"{'node':<{width}}  {'phase':<22} {'at':>10} {'took':>10}"]
    for phase, name in JOB_PHASES:
        if phase in tl.job_marks:
            at = tl.job_marks[phase] - origin
            took = "" if phase == "batch_start" else _s(at)
            row = f"{tl.batch_node:<{width}}  {name:<22} {_s(at):>10} {took:>10}"
            lines.append(row.rstrip())
    for node in nodes:
        for phase, start, end in tl.steps(node):
            n = tl.counts[node][phase]
            name = NAMES[phase] + (f" ({n})" if n > 1 else "")
            lines.append(f"{node:<{width}}  {name:<22} {_s(end):>10} {_s(end - start):>10}")
    slow = slowest_node(tl)
    if slow is not None:
        index, at = _reached(tl, slow)
        others = [_reached(tl, n) for n in nodes if n != slow]
        best = min((a for i, a in others if i == index), default=None)
        phase = NODE_PHASES[index][1] if index >= 0 else "no phase"
        line = f"slowest node: {slow}, {phase} at {_s(at)}"
        if best is not None:
            line += f" (the fastest node there at {_s(best)})"
        elif others and max(i for i, _ in others) > index:
            line += f" (the others got further: {NODE_PHASES[max(i for i, _ in others)][1]})"
        lines.append(line)
    longest = slowest_phase(tl)
    if longest is not None:
        node, phase, took = longest
        same = [e - s for n in nodes for p, s, e in tl.steps(n) if p == phase]
        lines.append(f"slowest phase: {NAMES[phase]} on {node}, {_s(took)} (median over "
                     f"{len(same)} node{'s' if len(same) != 1 else ''}: "
                     f"{_s(statistics.median(same))})")
    for i, rec in enumerate(tl.recoveries, 1):
        lines.extend(_recovery_lines(i, rec, origin, width))
    if svg:
        lines.append(f"picture: {svg} (open it in a browser)")
    return "\n".join(lines) + "\n"


def _recovery_lines(i: int, rec: Recovery, origin: float, width: int) -> List[str]:
    """A recovery's head line, each node's phases again (at: from the batch script's start;
    took: from the phase before, the first from the loss) and when the last node was back."""
    head = f"recovery {i}: {rec.lost} lost at {_s(rec.at - origin)}"
    if rec.spare is not None and rec.spare_at is not None:
        head += f", spare {rec.spare} started at {_s(rec.spare_at - origin)}"
    else:
        head += ", no spare started"
    lines = [head]
    for node in sorted(rec.nodes):
        for phase, start, end in rec.steps(node, origin):
            lines.append(f"{node:<{width}}  {NAMES[phase]:<22} {_s(end):>10} "
                         f"{_s(end - start):>10}")
    back = {n: m["first_collective"] for n, m in rec.nodes.items() if "first_collective" in m}
    if back:
        last = max(back, key=lambda n: (back[n], n))
        lines.append(f"recovery {i}: training again {_s(back[last] - rec.at)} after the loss "
                     f"(first collective of {len(back)} node{'s' if len(back) != 1 else ''}, "
                     f"the last {last})")
    return lines


def svg(tl: Timeline) -> str:
    """One row per node, a bar per phase (the batch script's part in grey), time from the
    batch script's start; each bar's tooltip says node, phase, when and how long."""
    nodes = sorted(set(tl.nodes).union(*(r.nodes for r in tl.recoveries)))
    origin = tl.origin
    spans = [s for n in nodes for s in tl.steps(n)] + \
        [s for r in tl.recoveries for n in nodes for s in r.steps(n, origin)]
    total = max([e for _, _, e in spans] + [0.001] +
                [t - origin for t in tl.job_marks.values()] +
                [r.at - origin for r in tl.recoveries])
    left, right, row, top = 120, 20, 20, 60
    plot = 860
    height = top + row * len(nodes) + 70
    x = lambda t: left + plot * t / total  # noqa: E731 - seconds to pixels
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + plot + right}" '
           f'height="{height}" font-family="sans-serif" font-size="12">',
           f'<text x="{left}" y="20" font-size="14">job {html.escape(tl.job)}: start-up '
           f'per node (seconds after the batch script started)</text>']
    step = next(s for s in (0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800, 3600)
                if total / s <= 10)
    tick = 0.0
    while tick <= total + 1e-9:
        out.append(f'<line x1="{x(tick):.1f}" y1="{top - 8}" x2="{x(tick):.1f}" '
                   f'y2="{top + row * len(nodes)}" stroke="#dddddd"/>')
        out.append(f'<text x="{x(tick):.1f}" y="{top - 12}" text-anchor="middle">'
                   f'{tick:g}</text>')
        tick += step
    batch_end = tl.job_marks.get("step_start", origin) - origin
    for i, node in enumerate(nodes):
        y = top + i * row
        out.append(f'<text x="{left - 6}" y="{y + 14}" text-anchor="end">'
                   f'{html.escape(node)}</text>')
        bars = ([("batch", 0.0, batch_end)] if batch_end > 0 else []) + tl.steps(node) + \
            [b for r in tl.recoveries for b in r.steps(node, origin)]
        for phase, start, end in bars:
            name = "batch script" if phase == "batch" else NAMES[phase]
            w = max(1.0, x(end) - x(start))
            out.append(f'<rect x="{x(start):.1f}" y="{y + 3}" width="{w:.1f}" height="{row - 6}" '
                       f'fill="{COLOURS[phase]}"><title>{html.escape(node)}: {name}, '
                       f'{end - start:.2f} s (until {end:.2f} s)</title></rect>')
    for rec in tl.recoveries:  # a red line where the supervisor found a node lost
        at = rec.at - origin
        spare = f", spare {rec.spare}" if rec.spare else ""
        out.append(f'<line x1="{x(at):.1f}" y1="{top - 8}" x2="{x(at):.1f}" '
                   f'y2="{top + row * len(nodes)}" stroke="#cc0000" stroke-width="2">'
                   f'<title>{html.escape(rec.lost)} lost at {at:.2f} s'
                   f'{html.escape(spare)}</title></line>')
    y = top + row * len(nodes) + 25
    for i, phase in enumerate(["batch"] + [p for p, _ in NODE_PHASES]):
        name = "batch script" if phase == "batch" else NAMES[phase]
        lx = left + (i % 4) * 210
        ly = y + (i // 4) * 18
        out.append(f'<rect x="{lx}" y="{ly - 10}" width="12" height="12" '
                   f'fill="{COLOURS[phase]}"/><text x="{lx + 16}" y="{ly}">{name}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def work_dir(job: str) -> Optional[str]:
    """The job's working directory as Slurm records it (scontrol for a job it still knows,
    else sacct), where it holds the job's marks; None otherwise."""
    asks = (["scontrol", "show", "job", "-o", job],
            ["sacct", "-n", "-X", "-P", "-j", job, "-o", "WorkDir%4096"])
    for argv in asks:
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=30,
                                 check=False).stdout
        except (OSError, subprocess.SubprocessError):
            continue
        if argv[0] == "scontrol":
            found = re.search(r"(?:^|\s)WorkDir=(\S+)", out)
            path = found.group(1) if found else ""
        else:
            path = (out.strip().splitlines() or [""])[0].strip()
        if path and (Path(path) / FOLDER / job).is_dir():
            return path
    return None


def run(job: Optional[str], submit_dir: Optional[str], svg_path: Optional[str]) -> str:
    """The report for ``jsc-compose timeline``; writes the picture (default:
    .timeline/JOBID.svg beside the job's folder). Without ``submit_dir``: this directory if
    the job's marks are here, else the job's working directory as Slurm records it."""
    job = job or os.environ.get("SLURM_JOB_ID")
    if not job or not job.isdigit():
        raise SpecError("timeline", "jobid", "a numeric Slurm job id (or run it inside the job)",
                        job or "")
    if submit_dir is None:
        here = (Path(FOLDER) / job).is_dir() or (Path(FOLDER) / f"{job}{MARKS}").is_file()
        submit_dir = "." if here else (work_dir(job) or ".")
    tl = read(job, submit_dir)
    path = svg_path or str(Path(submit_dir) / FOLDER / f"{job}.svg")
    try:
        write_file(svg(tl), path, "--svg")
    except SubmitError as exc:
        raise SpecError("timeline", "--svg", f"a file that can be written ({exc})",
                        path) from None
    return report(tl, path)


__all__ = ["FOLDER", "NODE_PHASES", "JOB_PHASES", "Recovery", "Timeline", "parse_line", "read", "report",
           "run", "slowest_node", "slowest_phase", "svg", "work_dir"]
