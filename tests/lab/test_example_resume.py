"""Ring 3 (real torch, local processes, no cluster): examples/ddp_train.py stopped and resumed
ends with the very parameters of an uninterrupted run, with 4 gloo ranks, where the summation
order of gloo's ring allreduce depends on DDP's bucket layout (2 ranks would hide it: a+b = b+a).

The example throws one forward/backward away at every start (warm_up) so that every counted
step uses DDP's rebuilt buckets; without it the two hashes differ (checked when it was written:
70669a15.. straight vs 15d12176.. resumed), with find_unused_parameters=True they are equal
but every step pays a traversal of the autograd graph and every rank prints a warning.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def train(ckpt: Path, steps: int) -> dict:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "4",
           str(REPO / "examples/ddp_train.py"), "--steps", str(steps), "--checkpoint-dir", str(ckpt)]
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    env.pop("REQUEUE_SIGNAL", None)
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("DDP_SUMMARY ")]
    assert len(lines) == 1, p.stdout[-2000:]
    # No per-step DDP traversal any more, hence none of its warnings either.
    assert "find_unused_parameters" not in p.stderr, p.stderr[-2000:]
    return json.loads(lines[0].split(" ", 1)[1])


def test_stopped_and_resumed_run_ends_bit_identical(tmp_path: Path):
    straight = train(tmp_path / "straight", 60)
    first = train(tmp_path / "cut", 11)
    resumed = train(tmp_path / "cut", 60)
    print("param_sha256 straight", straight["param_sha256"], "cut", first["param_sha256"],
          "resumed", resumed["param_sha256"])
    assert straight["world_size"] == 4 and straight["steps"] == 60 == resumed["steps"]
    assert first["steps"] == 11 and resumed["resumed_from_step"] == 11
    assert resumed["steps_run"] == 49
    assert first["param_sha256"] != straight["param_sha256"]  # the cut really stopped early
    assert resumed["param_sha256"] == straight["param_sha256"], (straight, resumed)
