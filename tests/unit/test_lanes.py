"""tests/helpers/lanes.py's lists name real lab tests, and lane c's files never use the lab.

`make test` selects by these lists (markers ``lane_b``, ``lane_c``): an entry that names no
test would silently move nothing, and a lane-c file that asks for the Slurm lab fails there.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.helpers import lanes

REPO = Path(__file__).resolve().parents[2]


def split(entry: str):
    path, _, name = entry.partition("::")
    return REPO / path, name


def test_every_entry_names_a_lab_test():
    for entry in lanes.LANE_B + lanes.LANE_C:
        path, name = split(entry)
        assert path.is_file() and path.parent == REPO / "tests" / "lab", entry
        if name:
            assert re.search(rf"^def {re.escape(name)}\(", path.read_text(), re.M), entry


def test_lab_wide_tests_come_first_and_lanes_are_disjoint():
    assert lanes.LANE_B[:len(lanes.LAB_WIDE)] == lanes.LAB_WIDE
    assert not {split(e)[0] for e in lanes.LANE_C} & {split(e)[0] for e in lanes.LANE_B}
    # the order lane b runs in: a named test of a file before the rest of that file
    spare = "tests/lab/test_spare_nodes.py::"
    fabric = "test_a_node_whose_fabric_dies_is_replaced_and_its_step_ended"
    assert lanes.order(spare + "test_no_spare_left_falls_back_to_requeue") \
        < lanes.order(spare + fabric)


def test_lane_c_files_ask_for_no_slurm_lab():
    for entry in lanes.LANE_C:
        text = split(entry)[0].read_text()
        signatures = re.findall(r"^def \w+\(([^)]*)\)", text, re.M)
        assert not any(re.search(r"\bcluster\b", s) for s in signatures), entry
        assert "scripts/cluster.sh" not in text and "sbatch" not in text, entry
