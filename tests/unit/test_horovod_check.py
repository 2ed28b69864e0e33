"""Ring 1: the image's Horovod check refuses MPI singletons (containers/files/horovod_check.py).

A rank whose MPI found no PMI server (psslurm with srun --mpi=pmix instead of pspmix) starts
alone: size 1, rank 0, and its allreduce of one value is "right". The check compares
hvd.size() with the tasks the launcher started; imported here without horovod or torch.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

PATH = Path(__file__).resolve().parents[2] / "containers" / "files" / "horovod_check.py"
_spec = importlib.util.spec_from_file_location("horovod_check", PATH)
check = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check)


@pytest.mark.parametrize("env, expected", [
    ({"SLURM_STEP_NUM_TASKS": "8", "SLURM_NTASKS": "8"}, ("SLURM_STEP_NUM_TASKS", 8)),
    ({"SLURM_NTASKS": "4"}, ("SLURM_NTASKS", 4)),
    # mpirun under Slurm: the srun step holds one daemon per node, mpirun knows the ranks.
    ({"OMPI_COMM_WORLD_SIZE": "8", "SLURM_STEP_NUM_TASKS": "2"}, ("OMPI_COMM_WORLD_SIZE", 8)),
    ({"HOROVOD_SIZE": "2", "SLURM_NTASKS": "16"}, ("HOROVOD_SIZE", 2)),  # horovodrun --gloo
    ({}, None), ({"SLURM_NTASKS": ""}, None), ({"SLURM_NTASKS": "x"}, None),
])
def test_expected_size_from_the_launcher(env, expected):
    assert check.expected_size(env) == expected


def test_singletons_fail_in_one_line():
    line = check.size_mismatch(1, {"SLURM_STEP_NUM_TASKS": "8", "SLURM_NTASKS": "8"})
    assert line is not None and "\n" not in line
    assert line.startswith("HOROVOD_FAIL hvd.size()=1 but the launcher started 8 tasks")
    assert "singleton" in line and "pspmix" in line


def test_matching_or_unknown_sizes_pass():
    assert check.size_mismatch(8, {"SLURM_STEP_NUM_TASKS": "8"}) is None
    assert check.size_mismatch(4, {"OMPI_COMM_WORLD_SIZE": "4", "SLURM_NTASKS": "2"}) is None
    assert check.size_mismatch(3, {}) is None  # no launcher said: nothing to compare
    other = check.size_mismatch(4, {"SLURM_NTASKS": "8"})
    assert other is not None and "singleton" not in other


def test_imports_without_horovod():
    # The module level needs neither horovod nor torch (they are imported in main()).
    code = ("import sys; sys.modules['horovod'] = None; sys.modules['torch'] = None; "
            f"import runpy; runpy.run_path({str(PATH)!r}, run_name='not_main')")
    done = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True,
                          check=False, timeout=60)
    assert done.returncode == 0, done.stderr
