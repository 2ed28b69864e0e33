"""Ring 1: the bench's `bandwidth` section (bench/bandwidth_bench.py) without Slurm: the node
pairs, the 2-node job rendered by the composer (one task per node, gloo, the floor passed on),
reading the program's ALLREDUCE_BW lines of the right pair only, and the table's ratio
against the best pair. The section itself runs on the lab: `make bench BENCH_ARGS="--only
bandwidth"`."""

from __future__ import annotations

import subprocess

import pytest

from bench import bandwidth_bench as bb
from bench.stats import Series
from launcher.render.jobscript import render_jobscript
from launcher.spec import parse_spec


def test_pairs_are_every_unordered_pair_once():
    assert bb.pairs(["jwb0002", "jwb0001"]) == [("jwb0001", "jwb0002")]
    assert bb.pairs(["jwb0003", "jwb0001", "jwb0002", "jwb0001"]) == [
        ("jwb0001", "jwb0002"), ("jwb0001", "jwb0003"), ("jwb0002", "jwb0003")]
    assert bb.pairs(["jwb0001"]) == []


@pytest.mark.parametrize("floor, tail", [(None, "examples/allreduce_bw.py --backend gloo &"),
                                         (0.5, "examples/allreduce_bw.py --backend gloo "
                                               "--floor 0.5 &")])
def test_the_job_is_one_gloo_task_per_node_of_two(floor, tail):
    text = render_jobscript(parse_spec(bb.spec_yaml(floor), "bench_bandwidth.yaml"))
    assert "#SBATCH --nodes=2\n" in text and "#SBATCH --ntasks-per-node=1\n" in text
    assert "source .venv/bin/activate\n" in text
    flat = text.replace(" \\\n    ", " ")  # the launch on one line, however it is wrapped
    assert "srun --kill-on-bad-exit=1 " in text and f" python3 -u {tail}\n" in flat
    subprocess.run(["bash", "-n"], input=text, text=True, check=True)


def line(hosts, size, busbw, world=2):
    return (f'1: ALLREDUCE_BW {{"bytes": {size}, "world_size": {world}, "backend": "gloo", '
            f'"busbw_gbps": {busbw}, "hosts": {hosts!r}}}'.replace("'", '"'))


def test_parse_reads_the_pairs_lines():
    out = "\n".join(["==> bench_bandwidth-7.out <==", line(["jwb0001", "jwb0002"], 65536, 0.1),
                     line(["jwb0001", "jwb0002"], 1048576, 0.9), "done"])
    assert bb.parse(out, ("jwb0002", "jwb0001")) == {65536: 0.1, 1048576: 0.9}
    assert bb.parse("no lines", ("jwb0001", "jwb0002")) == {}
    with pytest.raises(ValueError, match=r"hosts \['jwb0001', 'jwb0003'\], world size 2: "
                                         r"expected \['jwb0001', 'jwb0002'\], 2"):
        bb.parse(line(["jwb0001", "jwb0003"], 4096, 1.0), ("jwb0001", "jwb0002"))
    with pytest.raises(ValueError, match="world size 4"):
        bb.parse(line(["jwb0001", "jwb0002"], 4096, 1.0, world=4), ("jwb0001", "jwb0002"))


def test_rows_compare_each_pair_with_the_best_at_that_size():
    a, b, c = ("jwb0001", "jwb0002"), ("jwb0001", "jwb0003"), ("jwb0002", "jwb0003")
    series = {a: {2 ** 20: Series("a", [0.8, 1.0, 0.9]), 65536: Series("a", [0.1])},
              b: {2 ** 20: Series("b", [0.45])},
              c: {}}  # every job of this pair failed
    rows = bb.rows(series, {a: 0, b: 1, c: 0}, 0.5)
    assert rows == [
        ["jwb0001 - jwb0002", "64 KiB", "0.1 GB/s (min 0.1, max 0.1, n=1)", "1.00x", ""],
        ["jwb0001 - jwb0003", "64 KiB", "n/a", "n/a", ""],
        ["jwb0002 - jwb0003", "64 KiB", "n/a", "n/a", ""],
        ["jwb0001 - jwb0002", "1 MiB", "0.9 GB/s (min 0.8, max 1, n=3)", "1.00x", "0 of 3 runs"],
        ["jwb0001 - jwb0003", "1 MiB", "0.45 GB/s (min 0.45, max 0.45, n=1)", "0.50x",
         "1 of 1 runs"],
        ["jwb0002 - jwb0003", "1 MiB", "n/a", "n/a", "0 of 0 runs"]]
    assert [len(r) for r in bb.rows(series, {}, None)] == [4] * 6  # no floor: no column


@pytest.mark.parametrize("size, text", [(65536, "64 KiB"), (2 ** 20, "1 MiB"),
                                        (8 * 2 ** 20, "8 MiB"), (2 ** 30, "1 GiB"),
                                        (4100, "4100 B")])
def test_sizes_read_as_the_program_takes_them(size, text):
    assert bb.human(size) == text
