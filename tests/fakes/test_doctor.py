"""Ring 2: the doctor's node checks on this machine, without Slurm. The kit's entry
``python3 -I KIT/node/run.py doctor node|table`` runs the checks and collects from stdin, as
the jobscript's step pipes them; each node check (a port taken, a bind source
or image missing, a bad socket interface name, the launcher and torch inside, GPUs, clock
skew, a foreign program on the port)."""

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from launcher import kit
from launcher.node.doctor import local, node
from tests.helpers.doctor import report as _rep


def _conf(**kw):
    conf = {"runtime": "bare", "image": None, "binds": [], "gpus": 0, "launcher": None,
            "program": "python3", "timeout": 2.0, "deadline": 8.0, "max_skew": 2.0}
    conf.update(kw)
    return conf


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_bad_address_family_is_the_name_checks_cause():
    env = dict(os.environ, SLURM_NODEID="0", SLURM_STEP_NUM_NODES="1",
               TORCHRUN_JSC_ADDRESS_FAMILY="inet")
    rep = node.run_node(_conf(), "127.0.0.1", _free_port(), [], env)
    assert rep["checks"]["name"] == node.cell(False, "127.0.0.1", "TORCHRUN_JSC_ADDRESS_FAMILY: "
                                              "expected one of auto, ipv4, ipv6, any, got 'inet'")


def test_one_node_passes_here():
    env = dict(os.environ, SLURM_NODEID="0", SLURM_STEP_NUM_NODES="1")
    env.pop("GLOO_SOCKET_IFNAME", None)
    env.pop("NCCL_SOCKET_IFNAME", None)
    rep = node.run_node(_conf(), "127.0.0.1", _free_port(), [], env)
    checks = rep["checks"]
    assert [c for c in checks if checks[c]["ok"] is False] == [], checks
    assert checks["tcp"]["value"] == "listening" and checks["name"]["value"] == "127.0.0.1"
    assert checks["iface"]["value"] == "lo"
    assert checks["inside"]["ok"] and checks["gpus"]["value"] == "none requested (sees 0)"
    if not os.path.isdir("/sys/class/infiniband"):  # the negative path, for real: no cross
        assert checks["rdma"] == node.cell(None, "no RDMA devices", "none in "
                                           "/sys/class/infiniband: NCCL uses sockets")


def test_port_taken_bind_and_image_missing_bad_ifname(tmp_path):
    port = _free_port()
    bad = tmp_path / "image.sif"
    bad.write_bytes(b"\0" * 64)
    env = dict(os.environ, SLURM_NODEID="0", SLURM_STEP_NUM_NODES="1",
               GLOO_SOCKET_IFNAME="ib9", NCCL_SOCKET_IFNAME="=lo")
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", port))
        taken.listen(1)
        rep = node.run_node(_conf(runtime="apptainer", image=str(bad),
                                  binds=[str(tmp_path), str(tmp_path / "nope")]),
                            "127.0.0.1", port, ["true"], env)
    c = rep["checks"]
    assert c["tcp"]["cause"].startswith("already in use on this node")
    assert c["binds"] == node.cell(False, str(tmp_path / "nope"), "bind source missing on this "
                                   "node")
    assert c["image"]["cause"].startswith("not a SIF or squashfs image")
    assert c["iface"]["value"] == "GLOO_SOCKET_IFNAME=ib9"
    assert c["iface"]["cause"].startswith("no interface 'ib9' on this node")


def test_inside_checks_launcher_torch_and_gpus():
    conf = _conf(launcher="no-such-launcher-xyz")
    image, inside, gpus, rdma = local.inside([], conf, 10)
    assert inside == node.cell(False, "no-such-launcher-xyz", "not found on the PATH inside")
    facts = {"which": {"python3": "/usr/bin/python3"}, "python": "3.11", "torch": "1.8.1",
             "cvd": "0,1", "devs": []}
    assert local.inside_cell(facts, _conf(min_torch="1.9"))["cause"] == \
        "torchrun_jsc needs >= 1.9"
    shadowed = dict(facts, torch="2.1.0", label_torch="2.13.0+cpu")
    assert local.inside_cell(shadowed, _conf())["cause"].startswith(
        "the image was built with torch 2.13.0+cpu: another torch shadows it")
    assert local.gpu_cell(facts, _conf(gpus=2))["cause"].startswith("no /dev/nvidia* device files")
    assert local.gpu_cell(facts, _conf(gpus=2, fake_gpus=True))["value"] == \
        "2 (fake GRES: device files not checked)"
    assert local.gpu_cell(facts, _conf(gpus=4))["cause"] == \
        "the container does not see the requested GPUs"


@pytest.mark.parametrize("cuda, value, cause", [
    ({"rc": 0, "count": 2}, "2", ""),
    ({"error": "libcuda.so.1: cannot open shared object file"}, "libcuda.so.1",
     "CUDA is not usable inside the container: the driver's library does not load "
     "(libcuda.so.1: cannot open shared object file); Apptainer needs --nv, Enroot/pyxis "
     "NVIDIA_DRIVER_CAPABILITIES with compute"),
    ({"rc": 100, "count": 0}, "cuInit: CUDA error 100", "CUDA is not usable inside the container "
     "(no CUDA device visible: CUDA_VISIBLE_DEVICES hides them, or no device)"),
    ({"rc": 77, "count": 0}, "cuInit: CUDA error 77", "CUDA is not usable inside the container "
     "(see cuda.h's CUresult)"),
    ({"rc": 0, "count": 1}, "CUDA sees 1", "CUDA sees fewer GPUs than the 2 requested"),
])
def test_gpus_must_be_usable_by_cuda_not_only_device_files(cuda, value, cause):
    """Device files and CUDA_VISIBLE_DEVICES are not enough (issue 20): the driver's library
    must load inside the container and cuInit must see the GPUs."""
    facts = {"cvd": "0,1", "devs": ["/dev/nvidia0", "/dev/nvidia1"], "cuda": cuda}
    got = local.gpu_cell(facts, _conf(gpus=2))
    assert (got["ok"], got["value"], got["cause"]) == (not cause, value, cause)


@pytest.mark.parametrize("extra, value, cause", [
    ({"driver": "565.57.01", "image_cuda": "13.0"}, "driver 565.57.01",
     "the image's CUDA 13.0 needs driver >= 580, this node has 565.57.01: use CUDA's "
     "forward-compatibility libraries (cuda-compat, on LD_LIBRARY_PATH; datacenter GPUs only) "
     "or an image with CUDA 12"),
    ({"driver": "580.65.06", "image_cuda": "13.0"}, "2", ""),
    ({"driver": "550.54.15", "image_cuda": "12.8"}, "2", ""),
    ({"driver": None, "image_cuda": "13.0"}, "2", ""),  # no /proc/driver/nvidia: no verdict
    ({"nvlibs_missing": ["libnvidia-ptxjitcompiler.so.1"]}, "libnvidia-ptxjitcompiler.so.1",
     "the host driver's library is missing in the container: Apptainer's --nv binds what "
     "nvliblist.conf lists and the host's ldconfig cache finds (on aarch64 nodes often not "
     "all): bind the host's copy (ldconfig -p | grep NAME) and put its directory on "
     "LD_LIBRARY_PATH, as JUPITER users do with /opt/nvidia/lib"),
])
def test_gpus_name_an_old_driver_and_a_missing_driver_library(extra, value, cause):
    """CUDA 13 (torch 2.13's wheels) needs driver >= 580; cuInit still works on an older one
    (it is the driver's own library), so the doctor compares the versions itself."""
    facts = {"cvd": "0,1", "devs": ["/dev/nvidia0", "/dev/nvidia1"],
             "cuda": {"rc": 0, "count": 2}, **extra}
    got = local.gpu_cell(facts, _conf(gpus=2))
    assert (got["ok"], got["value"], got["cause"]) == (not cause, value, cause)


def test_inside_probe_reports_cuda_for_real():
    """The probe itself, run here: this machine has no NVIDIA driver, so libcuda does not load
    and the probe says so (the positive path ran on a real GPU: docs/development/gpu-check.md)."""
    done = subprocess.run([sys.executable, "-c", local.INSIDE_PY], capture_output=True,
                          text=True, timeout=60, check=True)
    facts = json.loads(done.stdout.split("doctor-inside ", 1)[1])
    if os.path.exists("/dev/nvidia0"):
        assert facts["cuda"].get("rc") == 0, facts
    else:
        assert "libcuda.so.1" in facts["cuda"]["error"], facts
        assert facts["driver"] is None and facts["nvlibs_missing"] == [
            "libnvidia-ml.so.1", "libnvidia-ptxjitcompiler.so.1"], facts
    # torch's own record of its CUDA, read without importing it (None for a CPU build)
    import torch
    assert facts["image_cuda"] == torch.version.cuda or (torch.version.cuda is None
                                                         and facts["image_cuda"] is None)


RUN_PY = str(kit.installed() / "node" / "run.py")


def test_the_kit_entry_collects_from_stdin(tmp_path):
    lines = node.MARK + json.dumps(_rep("n1", 0, "10.0.0.1")) + "\n"
    table = [sys.executable, "-I", RUN_PY, "doctor", "table", "{}", "n1i", "29400"]
    done = subprocess.run(table + ["n1"], input=lines, cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "doctor: all checks passed"
    done = subprocess.run(table + ["n1\nn2"], input=lines, cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 1 and "n2 name: no report" in done.stdout


def test_the_step_pipeline_runs_here(tmp_path):
    """``run.py doctor node CONF HOST PORT --`` (one node, bare) piped into ``run.py doctor
    table``, as the jobscript's step runs them minus srun: the node half's report line reaches
    the collector, every check passes on this machine."""
    conf, port = json.dumps(_conf()), str(_free_port())
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "SLURM_NODEID": "0",
           "SLURM_STEP_NUM_NODES": "1", "SLURMD_NODENAME": "n1"}
    check = subprocess.run([sys.executable, "-I", RUN_PY, "doctor", "node", conf, "127.0.0.1",
                            port, "--"], cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=60, check=False)
    assert check.returncode == 0, check.stderr
    assert check.stdout.startswith(node.MARK) and check.stdout.count("\n") == 1, check.stdout
    assert json.loads(check.stdout[len(node.MARK):])["node"] == "n1"
    table = subprocess.run([sys.executable, "-I", RUN_PY, "doctor", "table", conf, "127.0.0.1",
                            port, "n1"], input=check.stdout, cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=60, check=False)
    assert table.returncode == 0, table.stdout + table.stderr
    assert table.stdout.splitlines()[-1] == "doctor: all checks passed", table.stdout


def test_clock_skew_and_a_foreign_program_on_the_port():
    import threading

    def serve(sock, payload):
        conn, _ = sock.accept()
        with conn:
            conn.sendall(payload())
            conn.recv(16)

    for payload, expect in (
            (lambda: (json.dumps({"doctor": "n1", "t": time.time() + 5}) + "\n").encode(),
             "clock differs from the first node's by more than 2 s"),
            (lambda: b"SSH-2.0-OpenSSH\r\n", "no clock from the first node")):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            sock.listen(1)
            threading.Thread(target=serve, args=(sock, payload), daemon=True).start()
            tcp, clock = node.reach("127.0.0.1", sock.getsockname()[1], time.time() + 3, 2.0)
        assert tcp["ok"] is True
        assert clock["cause"] == expect
        assert clock["ok"] is (None if "no clock" in expect else False)
