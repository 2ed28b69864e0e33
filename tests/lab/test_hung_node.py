"""Ring 3: launch.hang_action replace on the lab: a node whose training hangs for real (alive,
its heartbeat going on) is found by the progress deadline, its stacks are written, and a spare
takes its place in the same job.

One job, Apptainer, torchrun mode, examples/ddp_train.py (2 nodes x 2 ranks, a checkpoint
every 5 steps, one spare) with --hang-node (the second training node) --hang-step 12: its two
ranks sleep at step 12 while the other two wait for them in DDP's all_reduce. The deadline
(launch.hang_timeout 121 s, the least for 2 nodes) names that node; checked in the job's log:
the stacks of every rank (the hung ones in train, on that node), the line naming the hung node
and the spare, and the program's own lines: resumed from its last checkpoint (step 10), every
checkpointed step after it once, the summary's world of 4 on the first node and the spare,
attempt 1; the job COMPLETED with no requeue; its timeline shows the recovery.

Needs three nodes in partition batch (the fixture of tests/lab/test_spare_nodes.py grows the
lab to three in place and shrinks it back).
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from launcher.submit import timeline
from tests.helpers import faultrows, lanes
from tests.helpers.labjobs import job_fields, story
from tests.lab.test_spare_nodes import submit as spare_job
from tests.lab.test_spare_nodes import (output, sh, steps, summaries,  # noqa: F401
                                        three_nodes, training, training_again, wait_for,
                                        wait_gone, workdir)

DEADLINE_S = 121  # launch.hang_timeout: the least the kit accepts for 2 nodes
HANG_STEP, TOTAL = 12, 30
pytestmark = pytest.mark.faults  # its rows: tests/helpers/faultrows.py


def submit(base: Path, name: str, hang_node: str) -> str:
    # --timeout: gloo's own (120 s by default) would end the waiting ranks first
    return spare_job(base, name, TOTAL, requeue=False, time_limit="00:08:00",
                     launch={"hang_timeout": DEADLINE_S, "hang_action": "replace"},
                     args=["--timeout", "900", "--hang-node", hang_node,
                           "--hang-step", str(HANG_STEP)])


def test_a_hung_node_is_replaced_by_the_spare_after_its_stacks(three_nodes, shared_tmp,
                                                               request):
    nodes = lanes.all_nodes()  # partition batch's, or lane b's (tests/helpers/lanes.py)
    assert len(nodes) == 3, nodes  # the job takes them all: the first two train
    victim, base, name = nodes[1], workdir(shared_tmp), "hung"
    t0 = time.monotonic()
    job_id = submit(base, name, victim)
    wait_for(job_id, base, name, r"hanging on purpose")
    wait_gone(job_id)
    out, i = output(base, name), job_fields(job_id)
    assert i["JobState"] == "COMPLETED" and i["Restarts"] == "0", story(out)
    first, second, spare = training(out)
    assert second == victim, story(out)
    assert re.search(rf"^rank [23]: hanging on purpose at step {HANG_STEP} on {victim} ", out,
                     re.M), story(out)
    # the deadline's stacks: the two hung ranks in train, on the hung node
    assert re.search(rf"^job {job_id}: no progress for \d+ s \(launch.hang_timeout "
                     rf"{DEADLINE_S}\) at .*: every rank's stack", out, re.M), story(out)
    assert re.search(rf"^== 2 ranks \(2-3 on {victim}\) in train at ddp_train.py:\d+$", out,
                     re.M), story(out)
    assert re.search(rf"^job {job_id}: no progress for {DEADLINE_S} s: 2 ranks in train at "
                     r"ddp_train.py:\d+, \d+ collectives? behind the other 2$", out, re.M), story(out)
    hung = re.search(rf"^job {job_id}: node {victim} hung at .* \(no progress for (\d+) s, its "
                     rf"stacks above\): replaced by spare {spare} \(node rank 1; 0 spares "
                     r"left\)$", out, re.M)
    # not before the deadline; after it, within the watcher's looks (every 12 s) on a
    # loaded machine
    assert hung and DEADLINE_S <= int(hung.group(1)) <= DEADLINE_S + 60, story(out)
    assert "the job ends" not in out and "lost at" not in out, story(out)
    [summary] = summaries(out)
    assert summary["attempt"] == 1 and summary["world_size"] == 4, summary
    assert summary["steps"] == TOTAL and summary["params_identical"], summary
    assert sorted(summary["hosts"]) == sorted([first, spare]), summary
    before, after = steps(out[:hung.start()]), steps(out[hung.end():])
    assert before == [5, 10] and summary["resumed_from_step"] == 10, (before, summary)
    assert after == list(range(15, TOTAL + 1, 5)), after  # every step after it once
    # on the job's timeline: a recovery, as after a lost node
    shown = timeline.report(timeline.read(job_id, str(base)))
    assert re.search(rf"^recovery 1: {victim} lost at [\d.]+ s, spare {spare} started at ",
                     shown, re.M), shown
    faultrows.record(request.node.nodeid, "a node hangs, alive (launch.hang_action replace)",
                     f"its stacks written after the deadline ({hung.group(1)} s), a spare takes "
                     "its place, no requeue", 0, training_again(shown),
                     HANG_STEP - 1, summary["resumed_from_step"])
    print(f"hung at step {HANG_STEP}, replaced after {hung.group(1)} s, job done in "
          f"{time.monotonic() - t0:.0f} s")
