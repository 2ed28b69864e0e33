"""Ring 2: the doctor's `rdma` column on this machine. The sysfs and /dev roots are
overridable (TORCHRUN_JSC_SYSFS_IB, TORCHRUN_JSC_DEV_IB), so the positive path runs here on a
faked device tree; the negative path (no devices) runs for real in
tests/fakes/test_doctor.py::test_one_node_passes_here."""

from __future__ import annotations

import ctypes
import json
import os
import socket

from launcher.node.doctor import node, report


def _conf(**kw):
    conf = {"runtime": "bare", "image": None, "binds": [], "gpus": 0, "launcher": None,
            "program": "python3", "timeout": 2.0, "deadline": 8.0, "max_skew": 2.0}
    conf.update(kw)
    return conf


def _loads_verbs() -> bool:
    try:
        ctypes.CDLL("libibverbs.so.1")
    except OSError:
        return False
    return "mlx5" in local_providers()


def local_providers():
    import glob
    return {os.path.basename(p)[3:].split("-rdmav")[0]
            for p in glob.glob("/usr/lib/*/libibverbs/lib*-rdmav*.so")}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(tmp_path, monkeypatch, dev_files):
    (tmp_path / "sys" / "mlx5_0").mkdir(parents=True)
    (tmp_path / "dev").mkdir()
    for name in dev_files:
        (tmp_path / "dev" / name).write_text("")
    monkeypatch.setenv("TORCHRUN_JSC_SYSFS_IB", str(tmp_path / "sys"))
    monkeypatch.setenv("TORCHRUN_JSC_DEV_IB", str(tmp_path / "dev"))
    env = dict(os.environ, SLURM_NODEID="0", SLURM_STEP_NUM_NODES="1", SLURMD_NODENAME="jwb0007")
    env.pop("GLOO_SOCKET_IFNAME", None)
    env.pop("NCCL_SOCKET_IFNAME", None)
    return node.run_node(_conf(), "127.0.0.1", _free_port(), [], env)


def test_faked_device_tree_passes_with_this_machines_verbs(tmp_path, monkeypatch):
    assert _loads_verbs(), ("this machine has no rdma-core with the mlx5 provider: the positive "
                            "path needs libibverbs1 and ibverbs-providers (make setup installs them)")
    rep = _run(tmp_path, monkeypatch, ["uverbs0", "rdma_cm"])
    assert rep["checks"]["rdma"]["ok"] is True, rep["checks"]["rdma"]
    assert rep["checks"]["rdma"]["value"] == "mlx5_0, verbs"


def test_faked_host_devices_without_device_files_is_one_cross_in_the_table(tmp_path,
                                                                           monkeypatch):
    rep = _run(tmp_path, monkeypatch, [])
    rep["nodeid"] = 0
    table = report.render_table(report.collect([node.MARK + json.dumps(rep)],
                                               ["jwb0007"]))
    lines = [l for l in table.splitlines() if l.startswith("jwb0007 rdma: ")]
    assert len(lines) == 1, table
    assert lines[0].startswith("jwb0007 rdma: no /dev/infiniband/uverbs*: the host has mlx5_0 "
                               "but the container does not see its device files: NCCL on this "
                               "node falls back to TCP sockets")
    assert "rdma" in table.splitlines()[1].split()
