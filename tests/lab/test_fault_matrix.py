"""Ring 3, the fault matrix's rows outside `make test` (marker ``matrix``; `make test-faults`
runs them with the other ``faults`` tests and prints the table): partial failures of the
fabric and of Slurm while a spare job trains. One job per case, the job of
tests/lab/test_spare_nodes.py (2 nodes x 2 ranks of examples/ddp_train.py, one spare,
job.heartbeat_timeout 10, job.requeue):

- a fabric blip on every training node, longer than the heartbeat timeout (cluster.sh fault
  NODES flap 14): the silence is seen and waited out, nothing is replaced, no spare is spent,
  the job completes without requeue, every step once. **Fails in the lab** (strict xfail, its
  reason): the batch host's own heartbeat never crosses the fabric;
- the Slurm controller stopped for longer than the nodes' batch host timeout (cluster.sh fault
  controller-stop): no node is lost for it and none ends the job; the job completes without
  requeue.

Outside `make test` because each costs minutes of lab time and the flap and the stopped
controller reach the whole lab (lane a's jobs too).
"""

from __future__ import annotations

import re
import time

import pytest

from tests.helpers import faultrows
from tests.helpers.labjobs import job_fields, story
from tests.lab.test_spare_nodes import (CLUSTER, output, sh,  # noqa: F401
                                        submit, summaries, three_nodes, training, wait_for,
                                        wait_gone, workdir)
from tests.lab.test_spare_nodes import image_sif  # noqa: F401  (autouse: image.sif)

pytestmark = [pytest.mark.faults, pytest.mark.matrix]
TOTAL = 60
TIMEOUT_S = 10  # job.heartbeat_timeout of test_spare_nodes.submit


def completed_alone(job_id: str, out: str) -> dict:
    """COMPLETED, no requeue, no node lost or replaced, every step done: the summary."""
    i = job_fields(job_id)
    assert i["JobState"] == "COMPLETED" and i["Restarts"] == "0", story(out)
    assert " lost at " not in out and "takes the place of" not in out, story(out)
    assert "has not answered for" not in out, story(out)  # no node ended the job
    [summary] = summaries(out)
    assert summary["attempt"] == 1 and summary["steps"] == TOTAL, summary
    assert summary["params_identical"] and summary["world_size"] == 4, summary
    return summary


@pytest.mark.xfail(strict=True, raises=AssertionError, reason=(
    "found in the lab (2026-11-29): the batch host's own heartbeat arrives locally while its "
    "fabric is down, so the other training node looks silent alone and is replaced: a spare "
    "spent (the job completes without requeue). Open: the supervisor must see its own fabric "
    "down (issue 41)"))
def test_a_blip_on_every_training_node_replaces_nothing(three_nodes, shared_tmp, request):
    base, name = workdir(shared_tmp), "blip"
    job_id = submit(base, name, TOTAL, requeue=True)
    wait_for(job_id, base, name, r"^step 10 ")
    first, second, _ = training(output(base, name))
    t0 = time.monotonic()
    p = sh(*CLUSTER, "fault", f"{first},{second}", "flap", str(TIMEOUT_S + 4), timeout=120)
    blip = time.monotonic() - t0
    assert p.returncode == 0, p.stdout + p.stderr
    wait_gone(job_id)
    out = output(base, name)
    summary = completed_alone(job_id, out)
    # the silence was seen (longer than the timeout), said once, and waited out
    held = re.search(rf"^job {job_id}: (.*) not replaced, waiting$", out, re.M)
    assert held, story(out)
    assert f"job {job_id}: every training node beats again: nothing was replaced" in out, \
        story(out)
    assert summary["resumed_from_step"] == 0, summary  # the workers were never restarted
    print(f"blip of {blip:.1f} s on {first},{second}: {held.group(1)}")
    faultrows.record(request.node.nodeid, f"a fabric blip on every training node ({TIMEOUT_S + 4}"
                     " s, longer than the heartbeat timeout)", "waited out: nothing replaced, "
                     "no spare spent, no requeue", 0, None, None, None)


def test_a_stopped_controller_ends_nothing(three_nodes, shared_tmp, request):
    base, name = workdir(shared_tmp), "ctld"
    job_id = submit(base, name, TOTAL, requeue=True)
    wait_for(job_id, base, name, r"^step 10 ")
    # longer than a node waits for its batch host's answers (3 x 10 s + two Slurm calls)
    stop = 3 * TIMEOUT_S + 30
    p = sh(*CLUSTER, "fault", "controller-stop", str(stop), timeout=stop + 60)
    assert p.returncode == 0, p.stdout + p.stderr
    wait_gone(job_id)
    out = output(base, name)
    summary = completed_alone(job_id, out)
    assert summary["resumed_from_step"] == 0, summary
    print(f"slurmctld stopped for {stop} s while the job trained")
    faultrows.record(request.node.nodeid, f"the Slurm controller stopped for {stop} s",
                     "nothing: no node lost, none ends the job, no requeue", 0, None, None,
                     None)
