"""Ring 3: images the kit did not build run the kit's modes unchanged (issue 27).

The kit's node-side code reaches the nodes from the kit itself (``$kit``, bound read-only into
the container at its own path), never from the image. Two images without the kit:

- ``build/base-local.sif``: the lab's base (Debian + torch), the demo job (examples/ddp_train.py
  finds the kit's library beside it in the clone);
- ``build/foreign.sif`` / ``.sqsh`` (tests/lab/images/foreign.def): that base plus what site
  images carry: its own PYTHONPATH and an unrelated package called ``launcher`` on it.

In the foreign image, under Apptainer, Enroot and pyxis, mode torchrun and mode srun complete a
2-node all_reduce whose program still imports the image's own ``launcher`` (not the kit's) with
the image's PYTHONPATH after the kit's hook directory; the torchrun job's log names the kit that
ran. The same program imports the kit's API ``torchrun_jsc_kit`` (progress, select_device) from
the kit, which the image lacks, and, with job.requeue, a plain handler of its own for the
requeue signal gets the signal on every rank when the job is sent it (``scancel -b``, as a
preemption): the kit's hook hands it over (issue 34). The hang report in the foreign image is tests/lab/test_hangs.py's (foreign-* cases).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers.labjobs import make

REPO = Path(__file__).resolve().parents[2]
PY = str(Path(os.environ.get("VENV", REPO / ".venv")) / "bin" / "python")
KIT = REPO / "launcher"
PROGRAM = "tests/helpers/programs/which_launcher.py"
FOREIGN_DEF = REPO / "tests/lab/images/foreign.def"
FOREIGN_SIF = REPO / "build/foreign.sif"
FOREIGN_SQSH = REPO / "build/foreign.sqsh"
RUNTIMES = {
    "apptainer": "runtime:\n  kind: apptainer\n  image: build/foreign.sif",
    "enroot": "runtime:\n  kind: enroot\n  image: build/foreign.sqsh",
    "pyxis": "runtime:\n  kind: pyxis\n  image: build/foreign.sqsh",
}
SPEC = """\
job:
  nodes: 2
  time: "00:05:00"
  partition: batch{requeue}
site: jsc
{runtime}
launch:
  mode: {mode}
  procs_per_node: 2
program: [python3, -u, {program}]
"""


def foreign_images() -> None:
    """build/foreign.sif and .sqsh, rebuilt when the definition or the base is newer."""
    make("image")  # builds build/base-local.sif (the base), as every image test does
    base = REPO / "build/base-local.sif"
    stale = not FOREIGN_SIF.exists() or \
        FOREIGN_SIF.stat().st_mtime < max(FOREIGN_DEF.stat().st_mtime, base.stat().st_mtime)
    if stale:
        run(["bash", "scripts/build-image.sh", "def", str(FOREIGN_DEF), str(FOREIGN_SIF)], 1200)
    if stale or not FOREIGN_SQSH.exists():
        run(["bash", "scripts/build-image.sh", "enroot", str(FOREIGN_SIF), str(FOREIGN_SQSH)],
            600)


def run(argv, timeout: float) -> subprocess.CompletedProcess:
    p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=REPO,
                       check=False)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return p


@pytest.fixture(scope="module")
def foreign() -> None:
    foreign_images()


def render(shared_tmp: Path, runtime: str, mode: str, program: str = PROGRAM,
           stop: bool = True) -> Path:
    """stop: with job.requeue, the program waits for the job's signal (--stop)."""
    spec = shared_tmp / f"foreign-{mode}.yaml"
    spec.write_text(SPEC.format(runtime=runtime, mode=mode,
                                program=program + (", --stop" if stop else ""),
                                requeue="\n  requeue: {before: 60}" if stop else ""))
    job = spec.with_suffix(".job")
    run([PY, "-m", "launcher", "render", str(spec), "-o", str(job)], 60)
    return job


def run_signalled(cluster, job: Path, out: Path):
    """Submit; once the ranks' own handlers are in place (FOREIGN_READY), send the job its
    requeue signal as a preemption does; wait for the end."""
    job_id = cluster.submit(str(job), ["-o", str(out)], cwd=str(REPO))
    node0 = REPO / "logs" / f"{job.stem}-{job_id}.node0.out"  # rank 0's (job.node_output)
    deadline = time.monotonic() + 300
    while "FOREIGN_READY" not in (node0.read_text() if node0.exists() else ""):
        state = subprocess.run(["squeue", "-h", "-o", "%T", "-j", job_id], capture_output=True,
                               text=True, timeout=30, check=False).stdout.strip()
        assert state and time.monotonic() < deadline, \
            f"job {job_id} ({state or 'gone'}): " + (out.read_text() if out.exists() else "") + \
            (node0.read_text() if node0.exists() else "")
        time.sleep(0.2)
    subprocess.run(["scancel", "-b", "--signal=USR2", job_id], timeout=30, check=True)
    cluster.wait_gone(job_id, 300)
    info = cluster.job_info(job_id)
    return cluster.JobResult(job_id=job_id, state=info.get("JobState", "?"),
                             exit_code=info.get("ExitCode", "?"),
                             num_nodes=int(info.get("NumNodes", "0")), elapsed_s=0.0,
                             output=cluster.collect_output(job_id, info, str(REPO)), info=info)


def summary(output: str) -> dict:
    found = [line.split("FOREIGN_SUMMARY ", 1)[1] for line in output.splitlines()
             if "FOREIGN_SUMMARY " in line]
    assert len(found) == 1, output
    return json.loads(found[0])


@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
@pytest.mark.parametrize("mode", ["torchrun", "srun"])
def test_foreign_image_runs_the_mode(cluster, shared_tmp, foreign, runtime, mode):
    job = render(shared_tmp, RUNTIMES[runtime], mode)
    text = job.read_text()
    assert 'kit="${PWD}/launcher"' in text and "python3 -c" not in text  # calls, not code
    res = run_signalled(cluster, job, shared_tmp / "foreign.out")
    assert res.state == "COMPLETED", res.output
    got = summary(res.output)
    # The kit's API from the kit (the image has none), and the program's own handler got the
    # job's signal on every rank.
    assert got["kit_api"] == f"{KIT}/task/hook/torchrun_jsc_kit/__init__.py", got
    # At least once each: Slurm signals every process of the step, and torchrun_jsc's agent
    # and Apptainer's starter pass it on as well.
    assert got["device"] == "cpu" and len(got["handled"]) == 4, got
    assert all(h and set(h) == {"SIGUSR2"} for h in got["handled"]), got
    assert got["ok"] and got["world_size"] == 4 and got["hosts"] == ["jwb0001", "jwb0002"], got
    # The program's `import launcher` is the image's own package, the kit never shadows it...
    assert got["launcher"] == "/opt/foreign/launcher/__init__.py", got
    # ...and the image's PYTHONPATH holds, after the kit's stack hook (armed in the rank).
    assert got["pythonpath"] == f"{KIT}/task/hook:/opt/foreign", got
    assert got["hooked"] is True, got
    if mode == "torchrun":  # node 0's agent names the kit it ran, the image has none
        assert f"torchrun-jsc-kit 0.1.0 from {KIT} (the image's unrelated launcher " \
            "package at /opt/foreign/launcher is not used)" in res.output, res.output
        assert "torchrun_jsc: endpoint=jwb0001i:" in res.output, res.output


def test_demo_job_in_an_image_without_the_kit(cluster, shared_tmp, foreign):
    """The demo (examples/ddp_train.py, torchrun_jsc) in the lab's base image, which has torch
    and no kit: torchrun_jsc and the hook come from the kit, the job completes right."""
    job = render(shared_tmp, "runtime:\n  kind: apptainer\n  image: build/base-local.sif",
                 "torchrun", "examples/ddp_train.py, --steps, '10'", stop=False)
    res = cluster.run_job(str(job), ["-o", str(shared_tmp / "demo-%j.out")], timeout=300,
                          cwd=str(REPO))
    assert res.state == "COMPLETED", res.output
    [got] = res.summaries
    assert cluster.check_summary(got, 4) == [], got
    assert f"torchrun-jsc-kit 0.1.0 from {KIT}\n" in res.output, res.output


def test_a_kit_the_nodes_cannot_see_is_one_line(cluster, shared_tmp):
    """A jobscript whose kit is gone (the install moved, or a login-node-local path) stops at
    its start with one line naming the path and the fix, before any step."""
    job = render(shared_tmp, RUNTIMES["apptainer"], "srun")
    text = job.read_text().replace('kit="${PWD}/launcher"', f'kit="{shared_tmp}/no-kit"')
    job.write_text(text)
    res = cluster.run_job(str(job), ["-o", str(shared_tmp / "nokit-%j.out")], timeout=120,
                          cwd=str(REPO))
    assert res.state == "FAILED", res.output
    lines = [line for line in res.output.splitlines()
             if line.strip() and not line.startswith("==> ")]  # the file's name
    assert lines == [f"jsc-compose: no kit at {shared_tmp}/no-kit on jwb0001: install "
                     "torchrun-jsc-kit where every node sees it (e.g. in $PROJECT) and render "
                     "again"], res.output


def test_an_image_for_another_architecture_is_refused_at_start(cluster, shared_tmp):
    """Issue 29: an image built for the other CPU architecture (a real SIF whose root
    partition says so, apptainer sif new/add) stops the job on its first node before any
    step, in one line naming both architectures, not an exec format error deep in a log."""
    from launcher.node.image_arch import normalize_arch
    from tests.unit.test_image_arch_read import sif

    here = normalize_arch(os.uname().machine)
    other = "aarch64" if here == "x86_64" else "x86_64"
    image = sif(shared_tmp, other, name="other-arch")
    job = render(shared_tmp, f"runtime:\n  kind: apptainer\n  image: {image}", "srun")
    res = cluster.run_job(str(job), ["-o", str(shared_tmp / "arch-%j.out")], timeout=120,
                          cwd=str(REPO))
    assert res.state == "FAILED", res.output
    lines = [line for line in res.output.splitlines()
             if line.strip() and not line.startswith("==> ")]
    assert lines == [f"{image}: image is {other} (SIF partition), node jwb0001 is {here}: it "
                     "would not run natively (exec format error, or very slow emulation where "
                     f"qemu is registered); build it for {here}: make image ARCH="
                     f"{'amd64' if here == 'x86_64' else 'arm64'}"], res.output
