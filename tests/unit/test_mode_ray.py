"""Ring 1 for launch mode ray: the rendered launch, spec errors, the node agent's argv,
environment and errors (launcher/task/ray.py, started as ``python3 "$kit/task/run.py"
ray-node``), no Ray and no Slurm.

The agent with a fake `ray`: tests/fakes/test_mode_ray.py; the real thing (Ray on 2 nodes,
bare and Apptainer, failures, scancel): tests/lab/test_mode_ray.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.task import procs, ray as ray_node
from launcher.render.jobscript import render_jobscript
from launcher.model import SpecError
from launcher.modes import plan_launch
from launcher.render.preview import render_preview
from launcher.spec import parse_spec
from launcher.shell import join
from launcher.task.torchrun_jsc.addresses import LaunchError
from launcher.task.torchrun_jsc.decide import Endpoint

BASE = "job: {nodes: 2}\nsite: jsc\nprogram: [python3, -u, d.py, 'a b', '$(x)']\n"


def spec(launch: str, runtime: str = "") -> object:
    return parse_spec(BASE + runtime + f"launch: {{mode: ray, {launch}}}\n", "x.yaml")


def test_launch_line_bare():
    _, plan = plan_launch(spec("procs_per_node: 2, object_store_memory: 100000000"))
    assert join(plan.launch, width=10000) == (
        'srun --kill-on-bad-exit=1 "--nodes=${nnodes}" --ntasks-per-node=1 '
        '"--cpus-per-task=${cpus_per_task}" --output=logs/%x-%j.node%n.out '
        'python3 "${kit}/task/run.py" ray-node '
        '"--head=${rdzv_host}:${rdzv_port}" "--suffix=${host_suffix}" --procs-per-node=2 '
        '--join-timeout=120 '
        "--object-store-memory=100000000 -- python3 -u d.py 'a b' '$(x)'")
    assert plan.tasks_per_node == 1 and not plan.master_env


@pytest.mark.parametrize("runtime, inside", [
    ("runtime: {kind: apptainer, image: r.sif}\n", "apptainer exec --bind"),
    ("runtime: {kind: enroot, image: r.sqsh}\n", "enroot-start"),
    ("runtime: {kind: pyxis, image: r.sqsh}\n", "--container-image="),
])
def test_every_runtime_runs_the_agent_inside(runtime, inside):
    text = render_jobscript(spec("join_timeout: 30", runtime))
    launch = text.split("# Launch:", 1)[1].split("\nsrun ", 1)[1]
    launch = " ".join(launch.replace("\\\n", " ").split())  # the renderer's line breaks
    agent = 'python3 "${kit}/task/run.py" ray-node "--head=${rdzv_host}:${rdzv_port}"'
    assert inside in launch and agent in launch and "--join-timeout=30" in launch
    assert launch.index(inside) < launch.index(agent)


def test_generic_site_has_no_suffix_and_preview_names_roles():
    s = parse_spec("job: {nodes: 2}\nprogram: [d.py]\nlaunch: {mode: ray}\n", "x.yaml")
    _, plan = plan_launch(s)
    assert not any(str(t).startswith("--suffix") for t in plan.task)
    text = render_preview(spec("procs_per_node: 2"), "jwb[0001-0002]", job_id=7,
                          system="juwelsbooster")
    assert "rendezvous endpoint jwb0001i:29507" in text
    assert " --suffix=i " in text  # the suffix the job picks on JUWELS Booster
    assert "per node (Ray head, then the driver once all nodes joined): python3 " \
        "'${kit}/task/run.py' ray-node --head=jwb0001i:29507 " in text
    assert "per node (Ray worker, joins the head):" in text


@pytest.mark.parametrize("launch, message", [
    ("object_store_memory: 1000", "x.yaml: launch.object_store_memory: must be between "
     "78643200 and 1125899906842624, got 1000"),
    ("join_timeout: 0", "x.yaml: launch.join_timeout: must be between 1 and 86400, got 0"),
])
def test_spec_errors(launch, message):
    with pytest.raises(SpecError) as e:
        spec(launch)
    assert str(e.value) == message


def test_requeue_is_refused():
    with pytest.raises(SpecError) as e:
        plan_launch(parse_spec("job: {nodes: 2, time: '10:00', requeue: {}}\nprogram: [d.py]\n"
                               "launch: {mode: ray}\n", "x.yaml"))
    assert str(e.value).startswith("x.yaml: job.requeue: mode ray: Ray (the node agents and "
                                   "Ray's daemons) does not survive the checkpoint signal")


def test_ray_keys_mean_nothing_elsewhere():
    with pytest.raises(SpecError) as e:
        parse_spec(BASE + "launch: {mode: torchrun, object_store_memory: 100000000}\n",
                       "x.yaml")
    assert str(e.value) == ("x.yaml: launch.object_store_memory: means nothing in mode "
                            "'torchrun': it is Ray's --object-store-memory per node (mode ray), "
                            "got 100000000")


# --- the agent, pure parts ---------------------------------------------------------------

def opts(*extra: str) -> ray_node.Options:
    return ray_node.parse_args(["--head=jwb0001i:29501", "--suffix=i", *extra, "--", "p", "-x"])


def test_ray_start_argv_head_and_worker():
    o = opts("--object-store-memory=100000000")
    head = ray_node.Node("jwb0001", 0, "7", ("jwb0001", "jwb0002"), "10.66.0.1", "jwb0001i", 2, 4)
    assert ray_node.ray_start_argv(o, head, "/tmp/ray-7") == [
        "ray", "start", "--head", "--port=29501", "--include-dashboard=false",
        "--dashboard-agent-listen-port=21501",
        "--node-ip-address=10.66.0.1", "--node-name=jwb0001", "--temp-dir=/tmp/ray-7",
        "--num-cpus=2", "--num-gpus=4", "--disable-usage-stats", "--block",
        "--object-store-memory=100000000"]
    worker = ray_node.Node("jwb0002", 1, "7", head.expected, "10.66.0.2", "jwb0002i", 2, 0)
    argv = ray_node.ray_start_argv(o, worker, "/tmp/ray-7")
    assert argv[:3] == ["ray", "start", "--address=jwb0001i:29501"] and "--head" not in argv
    assert "--dashboard-agent-listen-port=21501" in argv  # every node's agent, per job
    # Ray refuses a client server port without ray[client], which the images do not have.
    assert not any(a.startswith("--ray-client-server-port") for a in argv)
    assert o.program == ("p", "-x")


def test_two_jobs_on_one_node_get_different_ray_ports():
    """Ray's fixed default for the dashboard agent (52365, every node) collides between jobs
    sharing a node: each job's comes from its own GCS port, outside the rendezvous, Ray
    worker and ephemeral ranges."""
    assert ray_node.agent_port(29501) == 21501 != ray_node.agent_port(29502)
    ports = [ray_node.agent_port(head) for head in range(29500, 30500)]
    assert len(set(ports)) == 1000 and min(ports) >= 21000 and max(ports) < 22000


def test_env_user_values_win():
    node = ray_node.Node("jwb0002", 1, "7", (), "10.66.0.2", "jwb0002i")
    env = ray_node.ray_env({"NCCL_SOCKET_IFNAME": "ib", "PATH": "/bin"},
                           opts("--procs-per-node=2"), node, "/tmp/ray-7")
    assert env["GLOO_SOCKET_IFNAME"] == "jwb0002i" and env["NCCL_SOCKET_IFNAME"] == "ib"
    assert env["MASTER_ADDR"] == "jwb0001i" and env["RAY_ADDRESS"] == "jwb0001i:29501"
    assert env["LAUNCH_PROCS_PER_NODE"] == "2" and env["RAY_TMPDIR"] == "/tmp/ray-7"
    assert env["RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S"] == "0"
    # One authentication mode for head and workers, whatever ~/.ray/auth_token holds.
    assert env["RAY_AUTH_MODE"] == "disabled"
    assert ray_node.ray_env({"RAY_AUTH_MODE": "token"}, opts(), node, "/t")["RAY_AUTH_MODE"] \
        == "token"
    # launcher/node/net's one rule: your GLOO_SOCKET_IFNAME is NCCL's too; empty counts as unset.
    env = ray_node.ray_env({"GLOO_SOCKET_IFNAME": "eth1"}, opts(), node, "/t")
    assert env["GLOO_SOCKET_IFNAME"] == "eth1" and env["NCCL_SOCKET_IFNAME"] == "=eth1"
    env = ray_node.ray_env({"GLOO_SOCKET_IFNAME": ""}, opts(), node, "/t")
    assert env["GLOO_SOCKET_IFNAME"] == "jwb0002i" and env["NCCL_SOCKET_IFNAME"] == "=jwb0002i"


@pytest.mark.parametrize("argv, message", [
    (["--head=jwb0001i", "--", "p"], "--head: expected HOST:PORT, got 'jwb0001i'"),
    (["--head=h:0", "--", "p"], "--head: expected HOST:PORT, got 'h:0'"),
    (["--head=h:1"], "no program to run on the head node (expected: -- PROGRAM ...)"),
    (["--head=h:1", "--object-store-memory=10", "--", "p"],
     "--object-store-memory: Ray needs at least 78643200 bytes, got 10"),
    (["--head=h:1", "--join-timeout=0", "--", "p"], "--join-timeout: expected seconds > 0, got 0.0"),
])
def test_agent_bad_input(argv, message):
    with pytest.raises(LaunchError) as e:
        ray_node.parse_args(argv)
    assert str(e.value) == message


def test_join_error_names_the_missing_nodes():
    missing = ray_node.missing_nodes(("jwb0001", "jwb0002", "jwb0003"), ["jwb0001", "jwb0003"])
    assert ray_node.join_error(Endpoint("jwb0001i", 29501), 60, missing, 3) == (
        "ray_node: 1 of 3 nodes did not join the Ray head at jwb0001i:29501 within 60 s: jwb0002")


def test_node_from_env_and_allocation():
    node = ray_node.node_from_env({"SLURMD_NODENAME": "jwb0002", "SLURM_NODEID": "1",
                                   "SLURM_JOB_ID": "9", "SLURM_STEP_NODELIST": "jwb[0001-0002]"})
    assert (node.name, node.rank, node.expected) == ("jwb0002", 1, ("jwb0001", "jwb0002"))
    with pytest.raises(LaunchError, match="not inside a Slurm task: SLURMD_NODENAME"):
        ray_node.node_from_env({"SLURM_NODEID": "1", "SLURM_JOB_ID": "9"})
    assert ray_node.allocation({"SLURM_GPUS_ON_NODE": "4"})[1] == 4
    assert ray_node.allocation({"CUDA_VISIBLE_DEVICES": "0,1"})[1] == 2
    assert ray_node.allocation({})[1] == 0


def test_session_members_from_proc(tmp_path):
    for pid, session in (("10", "10"), ("11", "10"), ("12", "99")):
        (tmp_path / pid).mkdir()
        (tmp_path / pid / "stat").write_text(f"{pid} (ray::IDLE (x)) S 1 {pid} {session} 0 0\n")
    (tmp_path / "self").mkdir()
    assert sorted(procs.session_members(10, str(tmp_path))) == [10, 11]


# --- the agent as a worker, with a fake `ray` and a fake head port (ring 2) ---------------

def load_example(name: str):
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "examples" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # imports nothing but the standard library at load
    return module


def test_ray_train_sum_sizes_the_trainer_from_the_cluster():
    """examples/ray_train_sum.py: procs_per_node per alive node, else one worker per CPU;
    GPUs only when every node has them."""
    shape = load_example("ray_train_sum").cluster_shape

    def node(alive=True, cpus=2, gpus=0):
        res = {"CPU": float(cpus), **({"GPU": float(gpus)} if gpus else {})}
        return {"Alive": alive, "Resources": res}

    assert shape([node(), node(), node(alive=False)], 2) == (4, 0)
    assert shape([node(cpus=3), node(cpus=1)], None) == (4, 0)
    assert shape([node(gpus=4), node(gpus=4)], 4) == (8, 4)
    assert shape([node(gpus=4), node()], 1) == (2, 0)


def test_own_address_follows_the_route_to_the_head_off_the_management_network(monkeypatch):
    """Site generic on a JUPITER-like node: the plain name resolves to the management
    address (eth0) while the rendezvous (the Ray head) is the first node's IPoIB address: the
    agent gives Ray the address that reaches the head; where the name's address is on that
    interface (jsc's names), the name's."""
    from launcher.task import ray as agent
    from launcher.task.torchrun_jsc.decide import Endpoint

    local = {"10.128.0.6": "eth0", "10.13.0.6": "ib0"}
    names = {"jpbo-001-02": ("10.128.0.6",), "jpbo-001-02i": ("10.13.0.6",),
             "10.13.0.5": ("10.13.0.5",)}
    monkeypatch.setattr(agent.netinfo, "interface_addresses", lambda: dict(local))
    monkeypatch.setattr(agent.netinfo, "resolve", lambda ep: names[ep.host])
    monkeypatch.setattr(agent.netinfo, "source_address", lambda addr, port: "10.13.0.6")
    head = Endpoint("10.13.0.5", 6379)
    assert agent.own_address("jpbo-001-02", head, "auto") == ("10.13.0.6", "ib0")
    assert agent.own_address("jpbo-001-02i", head, "auto") == ("10.13.0.6", "ib0")
    monkeypatch.setattr(agent.netinfo, "source_address", lambda addr, port: None)
    assert agent.own_address("jpbo-001-02", head, "auto") == ("10.128.0.6", "eth0")
