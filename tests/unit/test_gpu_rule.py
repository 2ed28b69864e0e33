"""Ring 1: the examples' one GPU rule (torchrun_jsc_kit.select_device), with a stand-in for torch.

One visible GPU -> cuda:0 (psslurm binds each task to one GPU), several -> cuda:LOCAL_RANK,
GPUs requested but CUDA unusable -> one line and exit, never a silent CPU run."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from launcher.task.hook.torchrun_jsc_kit import gpu

ROOT = Path(__file__).resolve().parents[2]


class Device(tuple):
    @property
    def type(self):
        return self[0]


def fake_torch(count: int, cuda_build=None):
    return SimpleNamespace(
        cuda=SimpleNamespace(is_available=lambda: count > 0, device_count=lambda: count),
        version=SimpleNamespace(cuda=cuda_build),
        device=lambda kind, index=None: Device((kind, index)))


@pytest.mark.parametrize("visible, local_rank, index", [
    (1, 0, 0), (1, 3, 0),  # psslurm: each srun task sees its one GPU
    (4, 0, 0), (4, 3, 3),  # torchrun's workers, or tasks that see the node's GPUs
])
def test_index(visible, local_rank, index):
    assert gpu.device_index(visible, local_rank) == index


def test_local_rank_beyond_the_visible_gpus_is_refused():
    with pytest.raises(SystemExit) as err:
        gpu.device_index(2, 3)
    assert str(err.value) == ("LOCAL_RANK=3 but this task sees 2 GPUs: one GPU per worker "
                              "needs as many visible GPUs as workers on the node")


def test_select_device_on_gpus():
    assert gpu.select_device(fake_torch(1), {"LOCAL_RANK": "2"}) == ("cuda", 0)
    assert gpu.select_device(fake_torch(4), {"LOCAL_RANK": "2"}) == ("cuda", 2)
    assert gpu.select_device(fake_torch(4), {}) == ("cuda", 0)


@pytest.mark.parametrize("env, expected", [
    ({}, None),
    ({"CUDA_VISIBLE_DEVICES": ""}, None),
    ({"SLURM_GPUS_ON_NODE": "0"}, None),
    ({"NVIDIA_VISIBLE_DEVICES": "all"}, None),  # the image's, not a request
    ({"SLURM_JOB_GPUS": "void"}, None),
    ({"CUDA_VISIBLE_DEVICES": "0,1"}, "CUDA_VISIBLE_DEVICES=0,1"),
    ({"SLURM_GPUS_ON_NODE": "4"}, "SLURM_GPUS_ON_NODE=4"),
    ({"SLURM_STEP_GPUS": "2"}, "SLURM_STEP_GPUS=2"),
])
def test_requested(env, expected):
    assert gpu.requested(env) == expected


def test_gpus_requested_but_cuda_unusable_is_one_line():
    why = gpu.cpu_refusal({"SLURM_GPUS_ON_NODE": "4"}, "12.8", ["/dev/nvidia0"])
    assert why is not None and "\n" not in why
    assert why.startswith("GPUs were requested (SLURM_GPUS_ON_NODE=4) but "
                          "torch.cuda.is_available() is False (torch built for CUDA 12.8, 1 "
                          "/dev/nvidia* device files): not falling back to CPU")
    assert "NVIDIA_DRIVER_CAPABILITIES needs compute" in why and "--nv" in why
    # A CPU-only torch on a node with GPUs is refused too.
    assert "a CPU-only torch" in gpu.cpu_refusal({"CUDA_VISIBLE_DEVICES": "0"}, None,
                                                 ["/dev/nvidia0"])


def test_cpu_is_fine_without_a_request_or_without_any_gpu_trace():
    assert gpu.cpu_refusal({}, "12.8", ["/dev/nvidia0"]) is None
    # The lab's fake GRES: CUDA_VISIBLE_DEVICES set, no device files, a CPU-only torch.
    assert gpu.cpu_refusal({"CUDA_VISIBLE_DEVICES": "0,1,2,3"}, None, []) is None
    assert gpu.select_device(fake_torch(0), {"CUDA_VISIBLE_DEVICES": "0,1"}) == ("cpu", None)


def test_select_device_refuses_a_cuda_torch_without_cuda():
    with pytest.raises(SystemExit) as err:
        gpu.select_device(fake_torch(0, "12.8"), {"CUDA_VISIBLE_DEVICES": "0"})
    assert str(err.value).startswith("GPUs were requested (CUDA_VISIBLE_DEVICES=0)")


@pytest.mark.parametrize("example", ["ddp_train.py", "distributed_sum.py", "submitit_sum.py",
                                     "allreduce_bw.py"])
def test_examples_use_the_rule_and_no_cuda_index_of_their_own(example):
    text = (ROOT / "examples" / example).read_text()
    ast.parse(text)
    assert re.search(r"from torchrun_jsc_kit import .*select_device", text) and \
        "select_device(torch" in text
    assert 'torch.device("cuda"' not in text and "torch.cuda.is_available()" not in text
