"""torchrun_jsc against torch's real parser (needs torch; no network, no root).

Every torchrun argument, alias and PET_* variable must reach torch unchanged; only
rdzv_conf (is_host appended) and local_addr (when unset) may differ.
"""

import pytest

from launcher.task.torchrun_jsc import request_from_args
from launcher.task.torchrun_jsc.decide import NetFacts, apply, decide

PEER = NetFacts(("10.67.0.1",), (), "10.67.0.2", "jwb0002i")
BASE = ["--rdzv-backend=c10d", "--rdzv-endpoint=jwb0001i:29500", "--nnodes=2"]

ARGVS = [
    BASE + ["--nproc-per-node=4", "train.py", "--lr", "0.1"],
    BASE + ["--nproc_per_node=gpu", "--max-restarts=3", "--rdzv_id=77", "-m", "pkg.mod", "x"],
    BASE + ["--rdzv_conf=read_timeout=5", "--no-python", "hostname"],
    BASE + ["--log-dir=/tmp/l", "--redirects=3", "--tee=3", "--monitor-interval=1", "t.py"],
]


def patched(argv, env=None):
    # torch imported here, not at the top: `-m "not ring3"` without torch still collects.
    from torch.distributed import run as torch_run

    args = torch_run.parse_args(argv)
    d = decide(request_from_args(args, env or {}, (2, 13)), PEER)
    return args, apply(args, d)


@pytest.mark.parametrize("argv", ARGVS)
def test_only_rdzv_conf_and_local_addr_change(argv):
    args, new = patched(argv)
    before, after = vars(args), vars(new)
    changed = {k for k in before if before[k] != after[k]}
    assert changed == {"rdzv_conf", "local_addr"}
    assert after["local_addr"] == "10.67.0.2"
    assert after["rdzv_conf"].endswith("is_host=false")
    assert after["training_script_args"] == before["training_script_args"]


def test_pet_variables_are_honoured(monkeypatch):
    monkeypatch.setenv("PET_RDZV_CONF", "is_host=1,read_timeout=9")
    monkeypatch.setenv("PET_LOCAL_ADDR", "10.9.9.9")
    args, new = patched(BASE + ["t.py"])
    assert new.rdzv_conf == "is_host=1,read_timeout=9"  # explicit is_host from PET_* kept
    assert new.local_addr == "10.9.9.9"


def test_pet_rdzv_conf_gets_is_host(monkeypatch):
    monkeypatch.setenv("PET_RDZV_CONF", "read_timeout=9")
    _, new = patched(BASE + ["t.py"])
    assert new.rdzv_conf == "read_timeout=9,is_host=false"


def test_standalone_untouched():
    args, new = patched(["--standalone", "--nproc-per-node=2", "t.py"])
    assert vars(args) == vars(new)
