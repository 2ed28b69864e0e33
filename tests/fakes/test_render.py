"""Ring 2: rendered scripts run by bash with recording fakes of srun, scontrol, sbatch,
apptainer, enroot, mpirun, torchrun_jsc and python3 on PATH (tests/helpers/fake.py).

Proves what reading the text cannot: hostile values reach the program byte-identical, the
node count comes from the allocation, per-task variables expand in each task, Enroot
containers are created once and reused, and a failing task fails the job.
"""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Dict, Iterator, List

import pytest
import yaml

from launcher import kit
from launcher.render.jobscript import render_jobscript
from launcher.spec import load_spec, parse_spec
from tests.helpers.cluster import HOSTILE, HOSTILE_NAME, HOSTILE_NL, Cluster, cleaned

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def fakes(tmp_path: Path) -> Iterator[Cluster]:
    yield from cleaned(Cluster(tmp_path))


@pytest.fixture
def plain_fakes(tmp_path: Path) -> Iterator[Cluster]:
    """Enroot and pyxis mounts cannot express whitespace: a submit dir without it."""
    yield from cleaned(Cluster(tmp_path, "submit_dir"))


KIT = kit.installed()
RUN_PY = str(KIT / "node" / "run.py")


def job(name: str, fakes: Cluster) -> Path:
    """jobs/NAME.yaml rendered into the submit directory as `make jobs` renders it, but with
    this kit's absolute path (the checked-in jobs/NAME.job names "$PWD/launcher": the clone's
    kit, submitted from its root; tests/unit/test_render.py holds it equal to this render)."""
    script = fakes.dir / f"{name}.job"
    script.write_text(render_jobscript(load_spec(str(ROOT / "jobs" / f"{name}.yaml")),
                                       kit_dir=str(KIT)), encoding="utf-8")
    return script


def hostile_spec(runtime: dict) -> str:
    return yaml.safe_dump({
        "job": {"nodes": 2, "name": HOSTILE_NAME, "gpus_per_node": 2},
        "site": "jsc",
        # '$$' is a literal '$' in env.set (a lone '$' is refused: it is never expanded).
        "env": {"set": {"HOSTILE": HOSTILE_NL.replace("$", "$$"), "PLAIN": "x"},
                "pass": ["NCCL_*"]},
        "runtime": runtime,
        # The same in program and bind paths, where $NAME would be expanded on the node.
        "program": ["python3", *(a.replace("$", "$$") for a in (HOSTILE_NL, f"--flag={HOSTILE}")),
                    "", "*", "~"],
    }, allow_unicode=True)


def test_hostile_values_arrive_byte_identical_apptainer(fakes):
    bind_src = f"/data/{HOSTILE.replace(':', '').replace(',', '')}"
    (fakes.dir / "my image.sif").write_text("")
    text = hostile_spec({"kind": "apptainer", "image": "my image.sif", "binds": [
        {"source": bind_src.replace("$", "$$"), "target": "/in side", "read_only": True}]})
    script = fakes.render(text)
    # Through the real CLI and a fake sbatch that reads #SBATCH lines like sbatch does.
    (fakes.dir / "t.yaml").write_text(text, encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "launcher", "submit", "t.yaml"],
                          cwd=fakes.dir, env=dict(fakes.env, PYTHONPATH=str(ROOT)),
                          capture_output=True, text=True, timeout=60, check=False)
    assert (done.returncode, done.stdout) == (0, "4242\n"), done.stderr
    assert script.read_text() == render_jobscript(parse_spec(textwrap.dedent(text), "t.yaml"))
    assert fakes.records("sbatch-done")[0]["rc"] == 0
    programs = fakes.records("python3")
    assert len(programs) == 2  # one torchrun per node, one fake worker each
    for rec in programs:
        assert rec["argv"] == [HOSTILE_NL, f"--flag={HOSTILE}", "", "*", "~"]
        assert rec["env"]["HOSTILE"] == HOSTILE_NL and rec["env"]["PLAIN"] == "x"
        assert rec["env"]["SLURM_JOB_NAME"] == HOSTILE_NAME
    for rec in fakes.records("apptainer"):
        assert rec["argv"][:8] == ["exec", "--nv", "--bind", f"{KIT}:{KIT}:ro",
                                   "--bind", f"{bind_src}:/in side:ro", "--bind", str(fakes.dir)]
        assert rec["argv"][8] == "my image.sif"
    assert not list(fakes.dir.parent.rglob("pwned*"))


def test_hostile_values_enroot_and_secrets_by_name_only(plain_fakes):
    fakes = plain_fakes
    (fakes.dir / "img.sqsh").write_text("squash")
    script = fakes.render(hostile_spec({"kind": "enroot", "image": "img.sqsh"}))
    assert "s3cr3t" not in script.read_text()
    done = fakes.run(script, NCCL_SECRET_TOKEN="s3cr3t", NCCL_DEBUG="INFO")
    assert done.returncode == 0, done.stderr
    for rec in fakes.records("python3"):
        assert rec["argv"] == [HOSTILE_NL, f"--flag={HOSTILE}", "", "*", "~"]
        assert rec["env"]["HOSTILE"] == HOSTILE_NL
        assert rec["env"]["NCCL_SECRET_TOKEN"] == "s3cr3t"  # passed by name (NCCL_*)
        assert rec["env"]["NCCL_DEBUG"] == "INFO"
        assert rec["env"]["SLURM_JOB_NAME"] == "t"  # Slurm's variables, as in Apptainer
        assert "VIRTUAL_ENV" not in rec["env"]  # Enroot only forwards what it is told


def test_node_count_comes_from_the_allocation(fakes):
    (fakes.dir / "image.sif").write_text("")
    done = fakes.run(job("ddp_container", fakes), nodes=3)  # spec says 2; Slurm gave 3
    assert done.returncode == 0, done.stderr
    (srun,) = fakes.records("srun")
    assert "--nodes=3" in srun["argv"] and "--ntasks-per-node=1" in srun["argv"]
    assert "--kill-on-bad-exit=1" in srun["argv"]
    runs = fakes.records("torchrun_jsc")
    assert sorted(r["env"]["SLURM_NODEID"] for r in runs) == ["0", "1", "2"]
    for rec in runs:
        assert rec["argv"][:8] == ["--nnodes=3", "--nproc_per_node=4", "--rdzv_backend=c10d",
                                   "--rdzv_endpoint=jwb0001i:29742", "--rdzv_id=4242",
                                   "--rdzv_conf=join_timeout=603,read_timeout=121",
                                   "--max_restarts=0", "--no_python"]
    assert fakes.records("scontrol")[0]["argv"] == ["show", "hostnames", "jwb[0001-0003]"]


def test_per_task_variables_expand_in_each_task(fakes):
    (fakes.dir / "image.sif").write_text("")
    # Batch-scope values that a wrongly scoped script would hand to every task.
    done = fakes.run(job("ddp_srun", fakes), SLURM_PROCID="0", SLURM_LOCALID="0", SLURM_NODEID="0")
    assert done.returncode == 0, done.stderr
    envs = [r["env"] for r in fakes.records("python3")]
    assert sorted(int(e["RANK"]) for e in envs) == list(range(4))  # 2 nodes x 2 tasks
    for env in envs:
        assert env["RANK"] == env["SLURM_PROCID"] and env["LOCAL_RANK"] == env["SLURM_LOCALID"]
        assert env["NODE_RANK"] == env["SLURM_NODEID"] and env["WORLD_SIZE"] == "4"
        assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("jwb0001i", "29742")
        assert int(env["LOCAL_RANK"]) == int(env["RANK"]) % 2
        # The interface that reaches MASTER_ADDR, found on the master node (a local route)
        # and on the others alike; NCCL's exact-match form (a plain name is a prefix).
        assert (env["GLOO_SOCKET_IFNAME"], env["NCCL_SOCKET_IFNAME"]) == ("ib0", "=ib0")


def test_srun_mode_keeps_a_chosen_interface(fakes):
    (fakes.dir / "image.sif").write_text("")
    done = fakes.run(job("ddp_srun", fakes), GLOO_SOCKET_IFNAME="eth7", NCCL_SOCKET_IFNAME="ib3")
    assert done.returncode == 0, done.stderr
    envs = [r["env"] for r in fakes.records("python3")]
    assert {(e["GLOO_SOCKET_IFNAME"], e["NCCL_SOCKET_IFNAME"]) for e in envs} == {("eth7", "ib3")}
    # The kit's rule ran, in every task, from the kit (python3 -I KIT/node/run.py net-env).
    assert [r["run"] for r in fakes.records("python3-net")] == [RUN_PY] * 4


def test_srun_mode_unresolvable_master_fails_loudly(fakes):
    (fakes.dir / "image.sif").write_text("")
    done = fakes.run(job("ddp_srun", fakes), FAKE_GETENT_FAIL="1")
    assert done.returncode != 0 and "MASTER_ADDR: host 'jwb0001i' does not resolve: Name or " \
        "service not known\n" in done.stderr
    assert not fakes.records("python3")


@pytest.mark.parametrize("getent,family,ifname", [
    ("loopback_first", "", "ib0"),  # Debian: the own hostname is 127.0.1.1 first
    ("dual", "", "ib0"),            # AAAA listed first, A wins
    ("v6only", "", "ib6"),
    ("dual", "ipv6", "ib6"),        # the override, as torchrun_jsc reads it
    ("dual", "any", "ib6"),         # resolver order
    ("loopback_first", "IPv4", "ib0"),
])
def test_srun_mode_address_rule(fakes, getent, family, ifname):
    """The task script picks MASTER_ADDR's address by torchrun_jsc's rule (the kit's
    launcher/node/net, run by the fake python3 against the fake network), on every node:
    node 0 owns the address, the others route to it."""
    (fakes.dir / "image.sif").write_text("")
    done = fakes.run(job("ddp_srun", fakes), FAKE_GETENT=getent, TORCHRUN_JSC_ADDRESS_FAMILY=family)
    assert done.returncode == 0, done.stderr
    envs = [r["env"] for r in fakes.records("python3")]
    assert len(envs) == 4  # 2 nodes x 2 tasks
    assert {(e["GLOO_SOCKET_IFNAME"], e["NCCL_SOCKET_IFNAME"]) for e in envs} == {
        (ifname, f"={ifname}")}


@pytest.mark.parametrize("family,msg", [
    ("ipv4", "MASTER_ADDR: host 'jwb0001i' has no IPv4 address (TORCHRUN_JSC_ADDRESS_FAMILY="
             "ipv4); it resolves to fd00::1\n"),
    ("inet", "TORCHRUN_JSC_ADDRESS_FAMILY: expected one of auto, ipv4, ipv6, any, got 'inet'\n"),
])
def test_srun_mode_address_rule_refusals(fakes, family, msg):
    (fakes.dir / "image.sif").write_text("")
    done = fakes.run(job("ddp_srun", fakes), FAKE_GETENT="v6only", TORCHRUN_JSC_ADDRESS_FAMILY=family)
    assert done.returncode != 0 and msg in done.stderr
    assert not fakes.records("python3")


@pytest.mark.parametrize("name,image,tasks,mpi", [
    ("ddp_srun", "image.sif", 4, False),          # srun mode: the host python3, beside Apptainer
    ("horovod_container", "horovod.sif", 4, True),  # horovod over srun --mpi
    ("horovod_mpirun", "horovod.sif", 4, True),     # horovod over mpirun
])
def test_task_scripts_run_the_kits_rule(fakes, name, image, tasks, mpi):
    """Each task runs the kit's launcher/node/net (python3 -I KIT/node/run.py net-env, from
    launcher/node/task.sh), and its program gets the interface the rule picked (dual stack,
    IPv6 asked for: ib6)."""
    (fakes.dir / image).write_text("")
    done = fakes.run(job(name, fakes), FAKE_GETENT="dual", TORCHRUN_JSC_ADDRESS_FAMILY="ipv6")
    assert done.returncode == 0, done.stderr
    rules = fakes.records("python3-net")
    assert len(rules) == tasks and {r["run"] for r in rules} == {RUN_PY}
    assert {tuple(r["argv"]) for r in rules} == {("--mpi", "jwb0001i") if mpi else ("jwb0001i",)}
    envs = [r["env"] for r in fakes.records("python3")]
    assert len(envs) == tasks
    assert {(e["GLOO_SOCKET_IFNAME"], e["NCCL_SOCKET_IFNAME"]) for e in envs} == {("ib6", "=ib6")}
    if mpi:
        assert {(e["OMPI_MCA_btl_tcp_if_include"], e.get("HOROVOD_GLOO_IFACE")) for e in envs} \
            == {("ib6", "ib6")}


@pytest.mark.parametrize("name, kind", [
    ("ddp_srun", "srun"), ("horovod_container", "mpi"), ("horovod_mpirun", "mpi"),
    ("sum_accelerate", "ifname"), ("sum_deepspeed", "ifname"), ("sum_srun", "srun"),
    ("sum_submitit", "srun")])
def test_checked_in_jobs_call_the_kits_task_script(name, kind):
    """The rule is the kit's file, called by path in each task (launcher/node/task.sh KIND):
    no copy of it, nor of the name lookup (launcher/node/job.sh), in the jobscript."""
    text = (ROOT / "jobs" / f"{name}.job").read_text()
    assert f'bash "${{kit}}/node/task.sh" {kind} ' in text.replace(" \\\n    ", " ")
    assert text.count("node/task.sh") == 1
    assert "getent" not in text and "ip -o route" not in text and "python3 -I -c" not in text
    assert 'getent hosts "$1$suffix"' in (KIT / "node" / "job.sh").read_text()


def test_pyxis_srun_task_script_runs_the_kits_rule_in_the_image(plain_fakes):
    """pyxis starts the whole task in the image: the same script (the kit's, bound there at
    its own path), the image's python3."""
    fakes = plain_fakes
    (fakes.dir / "image.sqsh").write_text("squashfs")
    script = fakes.render("""\
        job: {nodes: 2}
        site: jsc
        runtime: {kind: pyxis, image: image.sqsh}
        launch: {mode: srun, procs_per_node: 2}
        program: [python3, t.py]
        """)
    done = fakes.run(script, FAKE_GETENT="loopback_first")
    assert done.returncode == 0, done.stderr
    rules = fakes.records("python3-net")
    assert len(rules) == 4 and {r["run"] for r in rules} == {RUN_PY}
    (srun,) = [r for r in fakes.records("srun") if "--container-image" in " ".join(r["argv"])]
    assert srun["argv"][-5:-2] == ["bash", str(KIT / "node" / "task.sh"), "srun"]
    envs = [r["env"] for r in fakes.records("python3")]
    assert {(e["GLOO_SOCKET_IFNAME"], e["NCCL_SOCKET_IFNAME"]) for e in envs} == {("ib0", "=ib0")}


def test_task_script_without_python3_says_so_in_one_line(tmp_path):
    """Where the rule runs without a python3 (a bare host, an image without one)."""
    done = subprocess.run(["/bin/bash", str(KIT / "node" / "task.sh"), "srun", "/bin/echo",
                           "STARTED"],
                          env={"PATH": str(tmp_path), "MASTER_ADDR": "jwb0001i",
                               "SLURMD_NODENAME": "jwb0002"},
                          capture_output=True, text=True, timeout=30)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == ("no python3 on jwb0002: the task script needs it to pick the socket "
                           "interface towards MASTER_ADDR\n")


def test_srun_mode_derived_nccl_ifname_is_exact_but_user_value_kept(fakes):
    (fakes.dir / "image.sif").write_text("")
    done = fakes.run(job("ddp_srun", fakes), GLOO_SOCKET_IFNAME="eth7")
    envs = [r["env"] for r in fakes.records("python3")]
    assert done.returncode == 0 and envs
    assert {(e["GLOO_SOCKET_IFNAME"], e["NCCL_SOCKET_IFNAME"]) for e in envs} == {
        ("eth7", "=eth7")}


def test_per_task_variables_unset_at_batch_scope_are_fine(fakes):
    (fakes.dir / "image.sif").write_text("")
    done = fakes.run(job("ddp_srun", fakes))  # set -u would abort on a batch-scope $SLURM_PROCID
    assert done.returncode == 0, done.stderr


def _containers(fakes: Cluster) -> List[str]:
    # ddp_enroot sets no data_path: the (fake) site's enroot.conf names it (tests/helpers/fake.py)
    data = Path(f"/tmp/enroot-{fakes.env['FAKE_USER']}/config-data")
    return sorted(p.name for p in data.iterdir() if p.name != ".lock")


def test_enroot_container_created_once_and_reused(plain_fakes):
    fakes = plain_fakes
    image = fakes.dir / "image.sqsh"
    image.write_text("squashfs v1")
    os.utime(image, (1000, 1000))
    for _ in range(2):
        done = fakes.run(job("ddp_enroot", fakes))
        assert done.returncode == 0, done.stderr
    creates = [r for r in fakes.records("enroot") if r["argv"][0] == "create"]
    assert len(creates) == 1  # first job, first node; the rest reuse it
    assert creates[0]["argv"][2].startswith(".partial-")  # renamed into place when complete
    (name,) = _containers(fakes)
    starts = [r for r in fakes.records("enroot") if r["argv"][0] == "start"]
    assert len(starts) == 4 and all(name in r["argv"] for r in starts)
    assert "--rw" not in starts[0]["argv"] and "--root" not in starts[0]["argv"]
    # The kit's command script, never the image's /etc/rc (a registry image's ENTRYPOINT).
    assert all(r["argv"][1:3] == ["--rc", f"{KIT}/node/enroot-rc.sh"] for r in starts)
    data = f"/tmp/enroot-{fakes.env['FAKE_USER']}/config-data"  # the site's enroot.conf
    assert all("ENROOT_DATA_PATH" not in r["env"] and r["data"] == data for r in starts)
    image.write_text("squashfs v2, rebuilt")  # a new image gets a new container
    os.utime(image, (2000, 2000))
    assert fakes.run(job("ddp_enroot", fakes)).returncode == 0
    creates = [r for r in fakes.records("enroot") if r["argv"][0] == "create"]
    assert len(creates) == 2 and name in _containers(fakes) and len(_containers(fakes)) == 2
    image.write_text("squashfs v3")  # keep_old: 1 keeps one older image's container
    os.utime(image, (3000, 3000))
    assert fakes.run(job("ddp_enroot", fakes)).returncode == 0
    assert len(_containers(fakes)) == 2 and name not in _containers(fakes)


def test_enroot_kill_mid_create_leaves_nothing_a_job_uses(plain_fakes):
    fakes = plain_fakes
    (fakes.dir / "image.sqsh").write_text("squashfs")
    script = job("ddp_enroot", fakes)
    proc = subprocess.Popen(["bash", str(script)], cwd=fakes.dir, start_new_session=True,
                            env=dict(fakes.env, SLURM_JOB_ID="41", SLURM_JOB_NAME="x",
                                     SLURM_JOB_NUM_NODES="1", SLURM_JOB_NODELIST="jwb0001",
                                     SLURM_JOB_CPUS_PER_NODE="4", FAKE_ENROOT_CREATE_S="30"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    data = Path(f"/tmp/enroot-{fakes.env['FAKE_USER']}/config-data")
    for _ in range(100):
        if data.is_dir() and any(p.name.startswith(".partial") for p in data.iterdir()):
            break
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)  # scancel: every process of the step at once
    proc.wait()
    assert [p.name for p in data.iterdir() if p.name.startswith(".partial")]
    assert not _containers(fakes)[1:] and not [n for n in _containers(fakes) if n[0] != "."]
    done = fakes.run(script, nodes=1)
    assert done.returncode == 0, done.stderr
    assert "left by an interrupted create" in done.stdout
    assert [n for n in _containers(fakes)] == [n for n in _containers(fakes) if n[0] != "."]
    assert fakes.records("python3")


def test_enroot_task_sees_slurm_and_gpu_variables(plain_fakes):
    fakes = plain_fakes
    (fakes.dir / "image.sqsh").write_text("squashfs")
    done = fakes.run(job("ddp_enroot", fakes), SLURM_JOB_GPUS="0,1,2,3", CUDA_VISIBLE_DEVICES="0,1,2,3")
    assert done.returncode == 0, done.stderr
    envs = sorted((r["env"] for r in fakes.records("torchrun_jsc")), key=lambda e: e["SLURM_NODEID"])
    assert [e["SLURM_NODEID"] for e in envs] == ["0", "1"]
    assert all(e["SLURM_JOB_ID"] == "4242" for e in envs)
    assert "GLOO_SOCKET_IFNAME" not in envs[0]  # unset stays unset (--env NAME would empty it)


def test_enroot_missing_image_fails_loudly(plain_fakes):
    fakes = plain_fakes
    done = fakes.run(job("ddp_enroot", fakes))
    assert done.returncode != 0
    assert "image.sqsh" in done.stderr and not fakes.records("torchrun_jsc")


def test_venv_job_activates_the_venv(fakes):
    activate = fakes.dir / ".venv" / "bin" / "activate"
    activate.parent.mkdir(parents=True)
    activate.write_text(f'export VIRTUAL_ENV="{fakes.dir}/.venv"\n'
                        'echo "$UNSET_IN_ACTIVATE" >/dev/null\n')  # not written for set -u
    done = fakes.run(job("ddp_venv", fakes))
    assert done.returncode == 0, done.stderr
    runs = fakes.records("torchrun_jsc")
    assert len(runs) == 2 and all(r["env"]["VIRTUAL_ENV"] == f"{fakes.dir}/.venv" for r in runs)
    assert (fakes.dir / "logs").is_dir()


def test_horovod_srun_one_rank_per_gpu(fakes):
    (fakes.dir / "horovod.sif").write_text("")
    done = fakes.run(job("horovod_container", fakes))
    assert done.returncode == 0, done.stderr
    (srun,) = fakes.records("srun")
    assert "--mpi=pmix" in srun["argv"] and "--ntasks-per-node=2" in srun["argv"]
    programs = fakes.records("python3")
    assert len(programs) == 4 and programs[0]["argv"][-1] == "/opt/torchrun-jsc/horovod_check.py"


def test_horovod_mpirun_one_rank_per_gpu(fakes):
    (fakes.dir / "horovod.sif").write_text("")
    done = fakes.run(job("horovod_mpirun", fakes))
    assert done.returncode == 0, done.stderr
    (mpirun,) = fakes.records("mpirun")
    assert mpirun["argv"][:4] == ["-np", "4", "--map-by", "ppr:2:node"]
    programs = fakes.records("python3")
    assert sorted(r["env"]["OMPI_COMM_WORLD_RANK"] for r in programs) == [str(i) for i in range(4)]
    # Open MPI's TCP transport is pinned to the interface that reaches the first node.
    assert {r["env"].get("OMPI_MCA_btl_tcp_if_include") for r in programs} == {"ib0"}


def test_mpirun_starts_one_torchrun_per_node(fakes):
    (fakes.dir / "image.sif").write_text("")
    done = fakes.run(job("ddp_mpirun_torchrun", fakes))
    assert done.returncode == 0, done.stderr
    assert fakes.records("mpirun")[0]["argv"][:4] == ["-np", "2", "--map-by", "ppr:1:node"]
    assert len(fakes.records("torchrun_jsc")) == 2


def test_pyxis_flags(plain_fakes):
    fakes = plain_fakes
    (fakes.dir / "image.sqsh").write_text("squashfs")
    done = fakes.run(job("ddp_pyxis", fakes))
    assert done.returncode == 0, done.stderr
    setup, srun = fakes.records("srun")
    assert not any(a.startswith("--container") for a in setup["argv"])  # on the host
    d = fakes.dir
    assert f"--container-image={d}/image.sqsh" in srun["argv"]
    assert f"--container-mounts={KIT}:{KIT}:ro,{d}:{d}" in srun["argv"]  # the kit, read-only
    assert f"--container-workdir={d}" in srun["argv"]
    (name,) = [a for a in srun["argv"] if a.startswith("--container-name=")]
    assert name.startswith("--container-name=image-8-")  # the image's stamp: size-mtime
    assert "--no-container-entrypoint" in srun["argv"]  # the kit's command, not an ENTRYPOINT


def test_failing_task_fails_the_job(fakes):
    (fakes.dir / "image.sif").write_text("")
    done = fakes.run(job("ddp_container", fakes), FAKE_PROGRAM_RC="3")
    assert done.returncode != 0


def test_enroot_refuses_submit_dir_with_space(fakes):
    (fakes.dir / "image.sqsh").write_text("")
    done = fakes.run(job("ddp_enroot", fakes))
    assert done.returncode == 1
    assert done.stderr == f"enroot cannot bind {fakes.dir} (it contains whitespace, ':' or ',')\n"
    assert not fakes.records("srun")


def test_missing_nodelist_fails_loudly(fakes):
    (fakes.dir / "image.sif").write_text("")
    env: Dict[str, str] = {"SLURM_JOB_NODELIST": ""}
    done = fakes.run(job("ddp_container", fakes), **env)
    assert done.returncode != 0 and "no first node" in done.stderr
    assert not fakes.records("srun")


def test_site_modules_env_and_cpus_reach_the_tasks(fakes):
    script = fakes.render("""\
        job: {nodes: 2, cpus_per_task: 8}
        site: {profile: generic, modules: [Stages/2025, "GCC 13"], socket_ifname: ib7}
        env: {set: {PLAIN: "a b"}}
        program: [python3, t.py]
        """)
    done = fakes.run(script, SLURM_CPUS_PER_TASK="8", SLURM_JOB_CPUS_PER_NODE="8(x2)")
    assert done.returncode == 0, done.stderr
    (module,) = fakes.records("module")
    assert module["argv"] == ["load", "Stages/2025", "GCC 13"]
    (srun,) = fakes.records("srun")
    assert srun["cpus"] == 8  # srun no longer inherits -c: the kit passes it
    for rec in fakes.records("torchrun_jsc"):
        assert (rec["env"]["GLOO_SOCKET_IFNAME"], rec["env"]["NCCL_SOCKET_IFNAME"]) == \
            ("ib7", "=ib7")  # NCCL's exact form: a plain name is a prefix match there
        assert rec["env"]["PLAIN"] == "a b"
        assert rec["argv"][3] == "--rdzv_endpoint=jwb0001:29742"  # generic: no suffix


@pytest.mark.parametrize("mode, allocation, expected", [
    ("torchrun", "48(x2)", "48"),  # the per-node agent gets every CPU of the node
    ("torchrun", "48,32", "32"),  # nodes differ: the smallest node's count fits every node
    ("srun", "48,32(x2)", "8"),  # one task per GPU: a quarter each
])
def test_srun_gets_the_cpus_of_the_allocation(fakes, mode, allocation, expected):
    script = fakes.render(f"""\
        job: {{nodes: 2}}
        site: jsc
        launch: {{mode: {mode}, procs_per_node: 4}}
        program: [python3, t.py]
        """)
    done = fakes.run(script, SLURM_JOB_CPUS_PER_NODE=allocation)
    assert done.returncode == 0, done.stderr
    (srun,) = fakes.records("srun")
    assert srun["cpus"] == int(expected)  # on its command line (tests/fakes/test_placement.py)


def test_pyxis_container_made_by_the_kit_and_an_unmarked_one_replaced(plain_fakes):
    """pyxis reuses whatever is listed under its name: the kit creates it, marks it complete
    last, and replaces a listed container without the mark (a create that was killed)."""
    fakes = plain_fakes
    image = fakes.dir / "image.sqsh"
    image.write_text("squashfs v1")
    os.utime(image, (1000, 1000))
    done = fakes.run(job("ddp_pyxis", fakes))
    assert done.returncode == 0, done.stderr
    data = Path(f"/tmp/enroot-{fakes.env['FAKE_USER']}/config-data")
    (name,) = [p.name for p in data.iterdir() if not p.name.startswith(".")]
    assert name == "pyxis_image-11-1000" and (data / name / ".torchrun-jsc-created").is_file()
    assert "pyxis: creating container pyxis_image-11-1000" in done.stdout
    (data / name / ".torchrun-jsc-created").unlink()  # as if the create had been killed
    again = fakes.run(job("ddp_pyxis", fakes))
    assert again.returncode == 0, again.stderr
    assert "removing pyxis_image-11-1000, left by an interrupted create" in again.stdout
    assert (data / name / ".torchrun-jsc-created").is_file()
    reused = fakes.run(job("ddp_pyxis", fakes))
    assert "pyxis: reusing container pyxis_image-11-1000" in reused.stdout
    os.utime(image, (2000, 2000))  # a rebuilt image: new name; keep_old 1 keeps one older
    fakes.run(job("ddp_pyxis", fakes))
    os.utime(image, (3000, 3000))
    newest = fakes.run(job("ddp_pyxis", fakes))
    assert "removing pyxis_image-11-1000 (an older image)" in newest.stdout
    assert sorted(p.name for p in data.iterdir() if not p.name.startswith(".")) == \
        ["pyxis_image-11-2000", "pyxis_image-11-3000"]
