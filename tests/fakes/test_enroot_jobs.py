"""Ring 2: the Enroot set-up asks the controller once per job, not once per node.

The set-up removes per-job containers (runtime.writable: NAME.jobID) of jobs that have ended,
by the user's job list from squeue. That list is asked once, at batch scope, and handed to the
set-up on every node as an argument: one `squeue` for a 4-node job (it was one per node: 1,000
controller queries at once on a 1,000-node job). What the list decides is unchanged: a
container of a listed job stays, of an unlisted one goes, and nothing goes when squeue fails
(`unknown`). Because the list is now made before a node takes the set-up's lock, a container of
a job newer than this one (created since) stays too; so does everything when the list is too
long to pass as one argument. The fake squeue (tests/helpers/fake.py) records every call.
"""

from pathlib import Path
from typing import Iterator, List

import pytest
import yaml

from tests.helpers.cluster import Cluster, cleaned

# The per-job containers a node holds before the job: of an ended job, of one still running
# (listed), of one submitted after this job asked (job 4242; not listed, a larger id).
ENDED, LISTED, NEWER = "image-1-1.job111", "image-1-1.job222", "image-1-1.job5000"


@pytest.fixture
def fakes(tmp_path: Path) -> Iterator[Cluster]:
    yield from cleaned(Cluster(tmp_path, "submit_dir"))


def data(fakes: Cluster) -> Path:
    # No runtime.data_path: the (fake) site's enroot.conf names it (tests/helpers/fake.py).
    return Path(f"/tmp/enroot-{fakes.env['FAKE_USER']}/config-data")


def run_job(fakes: Cluster, nodes: int = 4, **env: str) -> List[str]:
    """Run a writable enroot job on ``nodes`` nodes; the per-job containers left after it."""
    (fakes.dir / "image.sqsh").write_text("squashfs")
    for name in (ENDED, LISTED, NEWER):
        (data(fakes) / name / "etc").mkdir(parents=True)
    script = fakes.render(yaml.safe_dump({
        "job": {"nodes": nodes}, "runtime": {"kind": "enroot", "image": "image.sqsh",
                                             "writable": True},
        "program": ["python3", "-c", "pass"]}))
    done = fakes.run(script, nodes=nodes, **env)
    assert done.returncode == 0, done.stdout + done.stderr
    return sorted(p.name for p in data(fakes).iterdir() if ".job" in p.name)


def test_one_squeue_per_job_not_per_node(fakes):
    left = run_job(fakes, nodes=4, FAKE_SQUEUE="4242\n222\n123_4\n123_[5-9]")
    (call,) = fakes.records("squeue")
    assert call["argv"] == ["-h", "-u", fakes.env["FAKE_USER"], "-o", "%A"]
    assert "SLURM_NODEID" not in call["env"]  # batch scope, not a set-up task
    setups = [r for r in fakes.records("enroot") if r["argv"] == ["info"]]
    assert len(setups) == 4  # while the set-up itself ran on every node
    # This job's own writable copy (NAME.job4242) is made; the listed and the newer job's stay.
    assert ENDED not in left and LISTED in left and NEWER in left
    assert [n for n in left if n.endswith(".job4242")]


def test_squeue_failing_removes_no_per_job_container(fakes):
    left = run_job(fakes, FAKE_SQUEUE_RC="1")
    assert len(fakes.records("squeue")) == 1
    assert {ENDED, LISTED, NEWER} <= set(left)


def test_a_list_too_long_for_one_argument_counts_as_unknown(fakes):
    many = "\n".join(str(10**7 + i) for i in range(12_500))  # 112,499 characters
    left = run_job(fakes, nodes=2, FAKE_SQUEUE=many)
    assert {ENDED, LISTED, NEWER} <= set(left)
