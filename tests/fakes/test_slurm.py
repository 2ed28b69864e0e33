"""launcher.slurm: the rendezvous port rule, in Python and as the batch script's bash.

Ring 2: the bash lines, run by bash against ports this test listens on (127.0.0.1: a port
taken by "another job" on the first node), alone and inside a rendered job under the
recording fakes, where the launcher must get the moved port. The rule's numbers:
tests/unit/test_slurm.py.
"""

from __future__ import annotations

import os
import socket
import subprocess
import textwrap
from contextlib import ExitStack
from pathlib import Path
from typing import List, Tuple

import pytest

from launcher import __version__, kit
from launcher.render.jobscript import render_jobscript
from launcher.spec import parse_spec
from launcher.slurm import PORT_BASE, PORT_SPAN, rdzv_port, rdzv_port_lines
from tests.helpers import fake


def listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        return True
    except OSError:
        return False


def span_port(start: int, step: int) -> int:
    return PORT_BASE + (start - PORT_BASE + step) % PORT_SPAN


def job_with_taken_ports(stack: ExitStack, taken: int, ids: range) -> Tuple[int, int]:
    """(job id, expected port): a job id from ``ids`` whose rule's port and the ``taken - 1``
    after it now have a listener of this test's, and the port after them none."""
    for job_id in ids:
        ports = [span_port(rdzv_port(job_id), i) for i in range(taken + 1)]
        if any(listening(p) for p in ports):
            continue  # something on this machine holds one: another id
        socks: List[socket.socket] = []
        try:
            for port in ports[:taken]:
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", port))
                s.listen()
        except OSError:
            for s in socks:
                s.close()
            continue
        for s in socks:
            stack.callback(s.close)
        return job_id, ports[-1]
    pytest.fail(f"no job id in {ids} with {taken + 1} free ports from its rule's port")


def probe(job_id: int) -> str:
    # The rendered line, with the kit's function it calls (launcher/node/job.sh).
    script = (f'kit={kit.installed()}\nsource "$kit/node/job.sh" {__version__}\n'
              + "\n".join(rdzv_port_lines("rdzv_port", "rdzv_host")) + '\necho "$rdzv_port"\n')
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], capture_output=True,
                          text=True, timeout=30, check=False,
                          env={"PATH": os.environ["PATH"], "SLURM_JOB_ID": str(job_id),
                               "rdzv_host": "127.0.0.1"})
    assert done.returncode == 0 and done.stderr == "", done.stderr
    return done.stdout.strip()


@pytest.mark.parametrize("taken", [0, 1, 2])
def test_the_bash_lines_take_the_rules_port_or_the_next_free_one(taken):
    with ExitStack() as stack:
        job_id, expected = job_with_taken_ports(stack, taken, range(4242, 5242))
        assert probe(job_id) == str(expected)
        assert expected == rdzv_port(job_id) + taken  # not at the end of the span here


def test_the_bash_lines_wrap_inside_the_span():
    with ExitStack() as stack:
        job_id, expected = job_with_taken_ports(stack, 1, range(999, 100_000, PORT_SPAN))
        assert rdzv_port(job_id) == PORT_BASE + PORT_SPAN - 1
        assert probe(job_id) == str(expected) == str(PORT_BASE)


def test_a_rendered_job_rendezvouses_on_the_next_free_port(tmp_path: Path):
    """The first node is localhost (site generic: no suffix); "another job" listens on the
    rule's port there, and torchrun_jsc gets the next one in its --rdzv_endpoint."""
    spec = parse_spec(textwrap.dedent("""\
        job: {nodes: 1}
        site: generic
        launch: {procs_per_node: 2}
        program: [python3, t.py]
        """), "t.yaml")
    script = tmp_path / "t.job"
    script.write_text(render_jobscript(spec), encoding="utf-8")
    env = dict(os.environ, **fake.install(tmp_path / "bin", tmp_path / "log"))
    with ExitStack() as stack:
        job_id, expected = job_with_taken_ports(stack, 1, range(4242, 5242))
        env.update(SLURM_JOB_ID=str(job_id), SLURM_JOB_NAME="t", SLURM_JOB_NUM_NODES="1",
                   SLURM_JOB_NODELIST="localhost", SLURM_JOB_CPUS_PER_NODE="4")
        done = subprocess.run(["bash", str(script)], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert f"rendezvous localhost:{expected}" in done.stdout
    (run,) = fake.records(tmp_path / "log", "torchrun_jsc")
    assert f"--rdzv_endpoint=localhost:{expected}" in run["argv"]


def test_submitits_setup_exports_the_next_free_port(tmp_path: Path):
    """The same lines in executor_for's sbatch set-up: MASTER_PORT moves and is exported."""
    from launcher.submitit import submitit_plan

    spec = parse_spec("job: {nodes: 1}\nsite: generic\nlaunch: {mode: srun}\nprogram: [p]\n",
                      "s.yaml")
    setup = "\n".join(submitit_plan(spec, str(tmp_path / "folder")).setup)
    env = dict(os.environ, **fake.install(tmp_path / "bin", tmp_path / "log"))
    with ExitStack() as stack:
        job_id, expected = job_with_taken_ports(stack, 1, range(4242, 5242))
        env.update(SLURM_JOB_ID=str(job_id), SLURM_JOB_NUM_NODES="1",
                   SLURM_JOB_NODELIST="localhost", SLURM_JOB_CPUS_PER_NODE="4")
        done = subprocess.run(["bash", "-euo", "pipefail", "-c",
                               setup + '\nbash -c \'echo "child sees $MASTER_PORT"\'\n'],
                              cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert f"child sees {expected}\n" in done.stdout
