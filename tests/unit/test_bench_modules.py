"""Ring 1: every bench section's module imports (a renamed composer module once broke
`make bench --only scale` with nobody noticing: the bench runs outside CI), and the scale
section's jobscripts render: the kit's for torchrun and srun mode and the plain ones, each
running bench/programs/ready.py with --phases, whose PHASES line the section reads."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
MODULES = sorted(p.stem for p in BENCH.glob("*.py") if p.stem != "__init__")


@pytest.mark.parametrize("name", MODULES)
def test_bench_module_imports(name):
    importlib.import_module(f"bench.{name}")


@pytest.mark.parametrize("job", [("kit_job", "torchrun"), ("kit_job", "srun"),
                                 ("plain_job", "floor"), ("plain_job", "torchrun")])
def test_scale_jobs_run_ready_with_phases(tmp_path, monkeypatch, job):
    from bench import scale_bench as sb

    monkeypatch.setattr(sb, "ROOT", tmp_path)
    monkeypatch.setattr(sb, "OUT", tmp_path)
    builder, kind = job
    text = (tmp_path / getattr(sb, builder)(kind, 4)).read_text()
    assert "bench/programs/ready.py --phases" in text, text
    assert "#SBATCH --nodes=4\n" in text, text
    if builder == "kit_job":  # the bench's own lines around the composer's launch
        assert 'echo "BENCH batch_start=' in text and '\necho "BENCH srun=' in text, text
