"""Ring 1: the jobscript stays under 100 lines to read (README: "the jobscript itself stays
under 100 lines") for every combination of launch mode, runtime, site profile, job.requeue,
launch.hang_timeout and launch.preflight the spec loader accepts: a 4-node GPU spec with one
env.set, rendered and counted.

The combinations come from the loader itself: one it refuses is left out when the list is
built, and only for the refusals the schema documents (requeue or hang_timeout in a mode
that cannot have them, mpirun under pyxis); the count of accepted ones is pinned, so a rule
that quietly refuses more fails here too.
"""

import itertools
import re
from typing import Dict, List, Tuple

import pytest
import yaml

from launcher.render.jobscript import render_jobscript
from launcher.model import SITE_PROFILES, SpecError
from launcher.modes import MODES
from launcher.runtimes import RUNTIMES
from launcher.spec import parse_spec

MAX_LINES = 100
IMAGES = {"bare": None, "apptainer": "image.sif", "enroot": "image.sqsh", "pyxis": "image.sqsh"}
# Each mode, and the horovod variant whose ranks mpirun starts (a different plan).
LAUNCHES = [{"mode": mode} for mode in sorted(MODES)] + [{"mode": "horovod", "mpi": "mpirun"}]
DOCUMENTED_REFUSALS = re.compile(
    r"job\.requeue: mode \w+: .* does not survive the checkpoint signal"
    r"|launch\.hang_timeout: means nothing in mode"
    r"|runtime\.kind: pyxis containers start only through srun")
ACCEPTED = 468  # of 8 launches x 4 runtimes x 3 sites x 8 = 768


def spec_text(launch: dict, runtime: str, site: str, requeue: bool, hang: bool,
              preflight: bool) -> str:
    job = {"nodes": 4, "gpus_per_node": 4, "time": "02:00:00"}
    if requeue:
        job["requeue"] = {"signal": "USR2", "before": 300, "max": 3}
    doc = {"job": job, "site": site, "program": ["python3", "train.py", "--epochs", "3"],
           "launch": {**launch, **({"hang_timeout": 1800} if hang else {}),
                      **({"preflight": True} if preflight else {})},
           "env": {"set": {"OMP_NUM_THREADS": "4"}}}
    if IMAGES[runtime]:
        doc["runtime"] = {"kind": runtime, "image": IMAGES[runtime]}
    return yaml.safe_dump(doc)


def combinations() -> Tuple[List[Tuple[str, str]], Dict[str, str]]:
    """(id, spec text) of every accepted combination, and the refused ones' errors by id."""
    accepted, refused = [], {}
    for launch, runtime, site, requeue, hang, preflight in itertools.product(
            LAUNCHES, sorted(RUNTIMES), sorted(SITE_PROFILES), (False, True), (False, True),
            (False, True)):
        name = "-".join([*(str(v) for v in launch.values()), runtime, site,
                         *(flag for flag, on in (("requeue", requeue), ("hang", hang),
                                                 ("preflight", preflight)) if on)])
        text = spec_text(launch, runtime, site, requeue, hang, preflight)
        try:
            parse_spec(text, "jobs/x.yaml")
        except SpecError as e:
            refused[name] = str(e)
            continue
        accepted.append((name, text))
    return accepted, refused


ACCEPTED_SPECS, REFUSED = combinations()


def test_only_documented_refusals_and_the_count_is_pinned():
    unexpected = {k: v for k, v in REFUSED.items() if not DOCUMENTED_REFUSALS.search(v)}
    assert not unexpected
    assert len(ACCEPTED_SPECS) == ACCEPTED, (len(ACCEPTED_SPECS), len(REFUSED))


@pytest.mark.parametrize("text", [t for _, t in ACCEPTED_SPECS],
                         ids=[n for n, _ in ACCEPTED_SPECS])
def test_every_combination_renders_within_the_promise(text):
    script = render_jobscript(parse_spec(text, "jobs/x.yaml"))
    lines = script.splitlines()
    assert len(lines) <= MAX_LINES, f"{len(lines)} lines:\n{script}"
