"""Ring 3: the doctor on the local cluster, with faults injected (tests/helpers/labfaults.py).

Each fault must be named in the right cell (node x check) within 10 s. Faults that touch a
node's shared state (its /etc/hosts, a packet filter) are applied only inside an exclusive
allocation of both nodes (salloc), so no other job sees them, and are restored in `finally`;
this also proves the doctor inside an allocation. The wrong site suffix runs through the
other path (no allocation: the doctor submits its own short job). `launch.preflight` stops a
job whose node misses a bind source before the launch, with the table in its log.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Set, Tuple

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
PORT = 28431  # outside the derived range 29500-30499 that other jobs use
IMAGE = REPO / "image.sif"


@pytest.fixture(scope="module")
def image() -> Path:
    """image.sif at the repository root: built with the project's own target when missing."""
    if not IMAGE.exists():
        done = subprocess.run(["make", "image"], cwd=REPO, capture_output=True, text=True,
                              timeout=1800, check=False)
        assert done.returncode == 0, f"make image failed:\n{done.stdout[-3000:]}{done.stderr}"
    return IMAGE


def _env() -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    return dict(env, PYTHONPATH=str(REPO), DOCTOR_IMAGE=str(IMAGE))


def _write(folder: Path, name: str, spec: dict) -> str:
    (folder / name).write_text(yaml.safe_dump(spec))
    return name


def _spec(**runtime: object) -> dict:
    return {"job": {"nodes": 2, "time": "5", "partition": "batch", "node_output": None},
            "site": "jsc", "runtime": runtime or {"kind": "bare"},
            "launch": {"mode": "srun", "rdzv_port": PORT},
            "program": ["python3", "-c", "print('launched')"]}


def _crosses(result: dict) -> Set[Tuple[str, str]]:
    return {(f["node"], f["check"]) for f in result["failures"]}


def _cause(result: dict, node: str, check: str) -> str:
    found = [f for f in result["failures"] if (f["node"], f["check"]) == (node, check)]
    return f"{found[0]['value']}: {found[0]['cause']}" if found else ""


def _under_allocation(folder: Path, scenario: str, spec: str, salloc: List[str] = (),
                      doctor: List[str] = ()) -> Tuple[dict, dict, str]:
    """salloc both nodes, apply the faults, run `doctor --json`; (its JSON, labfaults, err)."""
    argv = ["salloc", "-N2", "--exclusive", "-p", "batch", "-t", "5", *salloc, sys.executable,
            str(REPO / "tests/helpers/labfaults.py"), scenario, str(PORT), folder.name, "--",
            sys.executable, "-m", "launcher", "doctor", "--json", *doctor, spec]
    done = subprocess.run(argv, cwd=folder, env=_env(), capture_output=True, text=True,
                          timeout=900, check=False)  # salloc may wait for others' jobs
    lines = done.stdout.splitlines()
    run = [json.loads(l[len("labfaults: "):]) for l in lines if l.startswith("labfaults: ")]
    docs = [json.loads(l) for l in lines if l.startswith("{")]
    assert run and docs, f"rc {done.returncode}\n{done.stdout}\n{done.stderr}"
    return docs[0], run[0], done.stderr


def test_four_faults_one_run_inside_an_allocation(cluster, image, shared_tmp: Path):
    # jwb0001: our own program holds the rendezvous port. jwb0002: resolves jwb0001i to
    # itself (its hosts file), lacks the bind source and holds a broken image (both under
    # its own /tmp).
    tag = shared_tmp.name
    spec = _write(shared_tmp, "mixed.yaml", _spec(
        kind="apptainer", image=f"/tmp/{tag}-img/image.sif", binds=[f"/tmp/{tag}-bind"]))
    result, run, err = _under_allocation(shared_tmp, "mixed", spec)
    assert run["rc"] == 1, err
    assert _crosses(result) == {("jwb0001", "tcp"), ("jwb0002", "same"), ("jwb0002", "first"),
                                ("jwb0002", "binds"), ("jwb0002", "image")}, result["failures"]
    assert "already in use" in _cause(result, "jwb0001", "tcp")
    assert _cause(result, "jwb0002", "same").startswith("10.66.0.2: the first node (jwb0001) "
                                                        "resolves it to 10.66.0.1")
    # glibc returns both lines of its hosts file ("multi on"): torchrun_jsc would refuse it
    assert _cause(result, "jwb0002", "first") == (
        "10.66.0.2, 10.66.0.1: resolves to addresses on this node (10.66.0.2) and not on it "
        "(10.66.0.1): use a name of one node only")
    assert _cause(result, "jwb0002", "binds") == f"/tmp/{tag}-bind: bind source missing on " \
        "this node"
    assert "not a SIF or squashfs image" in _cause(result, "jwb0002", "image")
    first = result["nodes"][0]["checks"]
    assert first["image"]["ok"] and first["inside"]["ok"] and first["binds"]["ok"]
    assert max(n["seconds"] for n in result["nodes"]) < 10 and run["seconds"] < 10, run


def test_dropped_traffic_inside_an_allocation(cluster, shared_tmp: Path):
    # Also the GPU check with the lab's fake GRES: 2 per node, counted, and said so.
    spec = _spec()
    spec["job"]["gpus_per_node"] = 2
    name = _write(shared_tmp, "drop.yaml", spec)
    result, run, err = _under_allocation(shared_tmp, "drop", name, ["--gpus-per-node=2"],
                                         ["--fake-gpus"])
    assert run["rc"] == 1, err
    assert _crosses(result) == {("jwb0002", "tcp")}, result["failures"]
    assert "no answer within the deadline: packets are dropped" in \
        _cause(result, "jwb0002", "tcp")
    assert result["nodes"][1]["checks"]["iface"]["value"] == "jwb0002i"
    assert [n["checks"]["gpus"]["value"] for n in result["nodes"]] == \
        ["2 (fake GRES: device files not checked)"] * 2
    assert run["seconds"] < 10, run


def test_wrong_suffix_through_its_own_job(cluster, shared_tmp: Path):
    spec = _spec()
    spec["site"] = {"profile": "generic", "hostname_suffix": "-ib"}
    name = _write(shared_tmp, "suffix.yaml", spec)
    # --nodelist and options after -- reach that job's sbatch
    done = subprocess.run([sys.executable, "-m", "launcher", "doctor", name, "--nodelist",
                           "jwb[0001-0002]", "--", "--job-name=doctor-suffix"], cwd=shared_tmp,
                          env=_env(), capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("doctor: 2 nodes, rendezvous jwb0001-ib:28431"), done.stdout
    for node in ("jwb0001", "jwb0002"):  # the lab's nodes have no DNS server: EAI_AGAIN
        assert any(l.startswith(f"{node} name: jwb0001-ib: does not resolve: ") for l in lines)
    assert lines[-1] == "doctor: 2 checks failed on 2 nodes"
    assert not list(shared_tmp.glob(".doctor-*")), "temporary script or log left behind"


def test_preflight_stops_the_job_before_the_launch(cluster, image, shared_tmp: Path):
    tag = shared_tmp.name
    spec = _spec(kind="bare")
    spec["job"]["node_output"] = None
    spec["launch"]["preflight"] = True
    spec["runtime"] = {"kind": "apptainer", "image": str(IMAGE), "binds": [f"/tmp/{tag}-bind"]}
    name = _write(shared_tmp, "pre.yaml", spec)
    sys.path.insert(0, str(REPO / "tests" / "helpers"))
    import labfaults  # noqa: E402

    with labfaults.only_on("jwb0001", f"{tag}-bind/data", b"x"):
        done = subprocess.run([sys.executable, "-m", "launcher", "submit", name],
                              cwd=shared_tmp, env=_env(), capture_output=True, text=True,
                              timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        job = done.stdout.strip()
        cluster.wait_gone(job, 180)
    info = cluster.job_info(job)
    log = (shared_tmp / f"pre-{job}.out").read_text()
    assert info.get("JobState") == "FAILED", log
    assert f"jwb0002 binds: /tmp/{tag}-bind: bind source missing on this node" in log
    assert "preflight: a check failed (table above); not launching" in log
    assert "launched" not in log.replace("not launching", "")
