"""Submit a jobscript to the local cluster, wait for it, and check the DDP_SUMMARY it printed.

Used by `make demo` (CLI below) and by the ring 3 tests (tests/conftest.py imports it).
Standard library only, so the login-node python works too.

    python scripts/cluster/slurmjob.py jobs/ddp_container.job [--timeout 600] [-- SBATCH_OPTIONS...]

Exit 0 only when the job completed and rank 0's summary is right: world size = nodes x
--nproc_per_node of the job (or its task count without torchrun), parameters identical on
all ranks, loss decreased.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Iterable

SUMMARY_PREFIX = "DDP_SUMMARY "
# torch's own log lines: glog-style C++ warnings ("[W1125 19:14:13.62 socket.cpp:207] ...",
# "[rank3]:[W1125 ...] ...") and the Python logger of torch.distributed ("W1125 19:14:13.98 ...").
# On a good run they are noise (the c10d reverse-lookup warning is the lab's: the container's
# glibc cannot name an IPv4-mapped IPv6 peer); on a failed one they are shown in full.
TORCH_LOG = re.compile(r"^(\[rank\d+\]:)?\[?[WIE]\d{4} \d\d:\d\d:\d\d\.\d+ ")
NODE_LOCAL = ("/tmp", "/dev/shm", "/var/tmp")


class JobError(RuntimeError):
    """The job could not be submitted or did not end in time."""


@dataclass
class JobResult:
    job_id: str
    state: str  # COMPLETED, FAILED, CANCELLED, TIMEOUT, ...
    exit_code: str  # "rc:signal" as scontrol shows it
    num_nodes: int
    elapsed_s: float  # submit -> gone from squeue
    output: str  # the job's stdout file plus its per-node logs
    info: dict[str, str] = field(default_factory=dict)

    @property
    def summaries(self) -> list[dict[str, Any]]:
        return parse_summaries(self.output)

    @property
    def ended_at(self) -> float:
        """Slurm's EndTime as unix time (1 s resolution)."""
        return slurm_time(self.info["EndTime"])

    def this_jobs(self, paths: Iterable[str | os.PathLike[str]]) -> list[str]:
        return written_since_submit(paths, self.info)


def slurm_time(text: str) -> float:
    """A timestamp as scontrol prints it (2026-11-26T05:16:03, local time) as unix time."""
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S").timestamp()


def written_since_submit(paths: Iterable[str | os.PathLike[str]],
                         info: dict[str, str]) -> list[str]:
    """Those of ``paths`` written since the job (``info``: scontrol's fields) was submitted: a
    restarted lab numbers jobs from 1 again, and files of an earlier job with the same id
    (logs/NAME-ID.*, .hangs/ID/) may remain."""
    since = slurm_time(info["SubmitTime"]) - 1 if "SubmitTime" in info else 0.0
    return sorted(str(p) for p in paths if os.path.getmtime(p) >= since)


def run(argv: list[str], timeout: float = 30, cwd: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=cwd, check=False)


def submit(jobfile: str, sbatch_args: list[str] | tuple[str, ...] = (), cwd: str | None = None,
           env: dict[str, str] | None = None) -> str:
    argv = ["sbatch", "--parsable", *sbatch_args, jobfile]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=30, cwd=cwd,
                       env=env, check=False)
    if p.returncode != 0:
        raise JobError(f"sbatch failed (rc {p.returncode}): {p.stderr.strip()}")
    return p.stdout.strip().split(";")[0]


def wait_gone(job_id: str, timeout: float, poll: float = 0.2) -> None:
    """Poll `squeue -h -j ID` until the job has left the queue; scancel it on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        p = run(["squeue", "-h", "-j", job_id])
        if not p.stdout.strip():
            return
        if time.monotonic() > deadline:
            run(["scancel", job_id])
            raise JobError(f"job {job_id} still in the queue after {timeout:.0f} s: cancelled\n"
                           f"{p.stdout}")
        time.sleep(poll)


def job_info(job_id: str) -> dict[str, str]:
    p = run(["scontrol", "show", "job", "-o", job_id])
    if p.returncode != 0:
        raise JobError(f"scontrol show job {job_id}: {p.stderr.strip()}")
    # StdOut paths have no spaces here; split key=value tokens
    return dict(tok.split("=", 1) for tok in p.stdout.split() if "=" in tok)


def collect_output(job_id: str, info: dict[str, str], cwd: str) -> str:
    """The job's stdout and any per-node log named after the job id (logs/NAME-ID.node*.out)
    written since the job was submitted."""
    paths = [info.get("StdOut", "")]
    workdir = info.get("WorkDir", cwd)
    paths += written_since_submit(glob.glob(os.path.join(workdir, "logs", f"*-{job_id}.*")), info)
    parts = []
    for path in paths:
        if path and os.path.isfile(path):
            with open(path, errors="replace") as f:
                parts.append(f"==> {path} <==\n{f.read()}")
    return "\n".join(parts)


def run_job(jobfile: str, sbatch_args: list[str] | tuple[str, ...] = (), timeout: float = 300,
            cwd: str | None = None, env: dict[str, str] | None = None) -> JobResult:
    cwd = cwd or os.getcwd()
    start = time.monotonic()
    job_id = submit(jobfile, list(sbatch_args), cwd=cwd, env=env)
    wait_gone(job_id, timeout)
    elapsed = time.monotonic() - start
    info = job_info(job_id)
    return JobResult(job_id=job_id, state=info.get("JobState", "?"),
                     exit_code=info.get("ExitCode", "?"), num_nodes=int(info.get("NumNodes", "0")),
                     elapsed_s=elapsed, output=collect_output(job_id, info, cwd), info=info)


def parse_summaries(text: str) -> list[dict[str, Any]]:
    out = []
    for line in text.splitlines():
        idx = line.find(SUMMARY_PREFIX)
        if idx >= 0:
            # raw_decode: mpirun --tag-output may glue another rank's tag to the line's end.
            out.append(json.JSONDecoder().raw_decode(line[idx + len(SUMMARY_PREFIX):])[0])
    return out


def nproc_per_node(jobfile: str) -> int | None:
    with open(jobfile) as f:
        m = re.search(r"--nproc[_-]per[_-]node[= ](\d+)", f.read())
    return int(m.group(1)) if m else None


def expected_world_size(jobfile: str, res: JobResult) -> int:
    """nodes x --nproc_per_node for a torchrun plan, else the job's task count (srun/mpirun)."""
    nproc = nproc_per_node(jobfile)
    return res.num_nodes * nproc if nproc else int(res.info.get("NumTasks", "0"))


def check_summary(summary: dict[str, Any], world_size: int | None) -> list[str]:
    problems = []
    if world_size is not None and summary.get("world_size") != world_size:
        problems.append(f"world_size {summary.get('world_size')}, expected {world_size}")
    if summary.get("params_identical") is not True:
        problems.append("parameters differ between ranks")
    first, last = summary.get("loss_first"), summary.get("loss_last")
    if not (isinstance(first, float) and isinstance(last, float) and last < first):
        problems.append(f"loss did not decrease: first {first}, last {last}")
    return problems


def without_torch_log(text: str) -> tuple[str, int]:
    """The text without torch's log lines, and how many were left out."""
    kept, dropped = [], 0
    for line in text.splitlines():
        if TORCH_LOG.match(line):
            dropped += 1
        else:
            kept.append(line)
    return "\n".join(kept), dropped


def node_local(path: str) -> str | None:
    """The node-local directory PATH lies under (compute nodes cannot see it), else None."""
    real = os.path.realpath(path)
    for top in NODE_LOCAL:
        if real == top or real.startswith(top + "/"):
            return top
    return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("jobfile")
    p.add_argument("--timeout", type=float, default=600, help="seconds until scancel")
    p.add_argument("--world-size", type=int, default=None,
                   help="expected world size (default: nodes x --nproc_per_node in the job)")
    p.add_argument("--verbose", action="store_true",
                   help="show torch's log lines also when the job succeeded")
    argv = sys.argv[1:] if argv is None else argv
    sbatch_args = argv[argv.index("--") + 1:] if "--" in argv else []
    args = p.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    local = node_local(os.getcwd())
    if local:
        print(f"slurmjob: warning: submitting from {os.getcwd()}, under node-local {local}: "
              "compute nodes cannot see it (no job log, the job fails at once); "
              "clone to a shared file system", file=sys.stderr)
    try:
        res = run_job(args.jobfile, sbatch_args, timeout=args.timeout)
    except (JobError, subprocess.TimeoutExpired) as e:
        print(f"slurmjob: {e}", file=sys.stderr)
        return 1
    world = args.world_size or expected_world_size(args.jobfile, res)
    sums = res.summaries
    problems = [] if res.state == "COMPLETED" else [f"job state {res.state}"]
    if not res.output.strip():
        problems.append(f"no job output at {res.info.get('StdOut', '?')}: is "
                        f"{res.info.get('WorkDir', os.getcwd())} on a file system the compute "
                        "nodes see?")
    if len(sums) != 1:
        problems.append(f"expected one DDP_SUMMARY line, found {len(sums)}")
    else:
        problems += check_summary(sums[0], world)
    shown, hidden = (res.output, 0) if problems or args.verbose else without_torch_log(res.output)
    print(shown)
    if hidden:
        print(f"({hidden} lines of torch's log warnings not shown: they are in the files above; "
              "--verbose shows them)")
    print(f"job {res.job_id}: {res.state} (exit {res.exit_code}) on {res.num_nodes} nodes, "
          f"submit -> done {res.elapsed_s:.1f} s")
    if len(sums) == 1:
        print(SUMMARY_PREFIX + json.dumps(sums[0], sort_keys=True))
    for problem in problems:
        print(f"slurmjob: FAIL: {problem}", file=sys.stderr)
    if not problems:
        print(f"slurmjob: OK: world size {sums[0]['world_size']}, parameters identical, "
              f"loss {sums[0]['loss_first']:.4f} -> {sums[0]['loss_last']:.4f}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
