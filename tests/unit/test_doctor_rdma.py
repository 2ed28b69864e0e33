"""Ring 1: the doctor's `rdma` column. With RDMA devices on the host
(/sys/class/infiniband) the container must see /dev/infiniband/uverbs* and load rdma-core's
verbs library with a provider; otherwise one cross says that NCCL falls back to TCP sockets on
that node, and what to fix. The cell's verdicts from given facts; the faked device trees on
this machine: tests/fakes/test_doctor_rdma.py."""

from __future__ import annotations

import pytest

from launcher.node.doctor import local, node

OK_FACTS = {"ib_dev": ["rdma_cm", "uverbs0"], "verbs": "", "providers": ["efa", "mlx5"]}


def _conf(**kw):
    conf = {"runtime": "bare", "image": None, "binds": [], "gpus": 0, "launcher": None,
            "program": "python3", "timeout": 2.0, "deadline": 8.0, "max_skew": 2.0}
    conf.update(kw)
    return conf


def test_no_devices_on_the_host_is_no_cross():
    assert local.rdma_cell([], None, _conf())["ok"] is None
    assert local.rdma_cell([], {"ib_dev": None, "verbs": "gone", "providers": []},
                           _conf())["ok"] is None


def test_devices_seen_and_verbs_loaded_pass():
    c = local.rdma_cell(["mlx5_0", "mlx5_1"], OK_FACTS, _conf())
    assert c == node.cell(True, "mlx5_0 mlx5_1, verbs", "providers: efa mlx5")


@pytest.mark.parametrize("runtime, facts, value, words", [
    ("enroot", dict(OK_FACTS, ib_dev=None), "no /dev/infiniband/uverbs*",
     ["the host has mlx5_0 but the container does not see its device files",
      "--container-mounts=/dev/infiniband", "10-system.fstab"]),
    ("apptainer", dict(OK_FACTS, ib_dev=["rdma_cm"]), "no /dev/infiniband/uverbs*",
     ["Apptainer binds the host's /dev unless --contain"]),
    ("apptainer", dict(OK_FACTS, verbs="libibverbs.so.1: cannot open shared object file"),
     "libibverbs.so.1", ["cannot load the verbs library (libibverbs.so.1: cannot open",
                         "install rdma-core (libibverbs1 ibverbs-providers) in the image"]),
    ("enroot", dict(OK_FACTS, providers=["efa"]), "providers: efa",
     ["has no mlx5 provider for mlx5_0", "install ibverbs-providers"]),
])
def test_one_cross_with_the_fallback_and_the_fix(runtime, facts, value, words):
    c = local.rdma_cell(["mlx5_0"], facts, _conf(runtime=runtime))
    assert c["ok"] is False and c["value"] == value and "\n" not in c["cause"]
    assert "NCCL on this node falls back to TCP sockets" in c["cause"]
    for w in words:
        assert w in c["cause"]


def test_pyxis_cannot_look_inside_before_the_launch():
    na = local.inside([], _conf(runtime="pyxis"), 1, ["mlx5_0"])[3]
    assert na["ok"] is None and na["cause"].startswith("pyxis:")
