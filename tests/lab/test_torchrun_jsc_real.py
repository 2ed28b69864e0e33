"""Ring 3: real torch processes over real sockets, two nodes in namespaces (root).

The network is JSC-like (tests/helpers/jscnet.py): hostname tjsc0001 is not reachable from the
other node, tjsc0001i is. Plain torchrun must fail here (the bug is reproduced), and
torchrun_jsc must pass with and without Slurm variables. Control: when the hostname itself
is on the shared segment, both pass.

The interpreter (and so the torch release) is this one, torch 2.13 in CI, unless
TORCHRUN_JSC_TEST_PYTHON names another: scripts/torch-compat.sh runs this file under older
releases (1.9, 1.13, 2.0, 2.4, 2.5) in their own virtual environments (make torch-compat).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest

from launcher.task.torchrun_jsc import torch_version
from tests.helpers import jscnet

ROOT = Path(__file__).resolve().parents[2]
PYTHON = os.environ.get("TORCHRUN_JSC_TEST_PYTHON") or sys.executable
PROGRAM = str(ROOT / "tests" / "helpers" / "programs" / "collectives_check.py")
NODE_TIMEOUT_S = 120


@pytest.fixture(scope="module")
def net(tmp_path_factory):
    net = jscnet.up(str(tmp_path_factory.mktemp("jscnet")))
    yield net
    jscnet.down()


def launch(net: jscnet.JscNet, launcher: List[str], endpoint: str, hosts: str,
           env_per_node: Optional[Dict[str, Dict[str, str]]] = None,
           extra: Tuple[str, ...] = ()) -> List[Tuple[int, str]]:
    """Start the launcher on both nodes at once; return (rc, output) per node."""
    argv = [*launcher, "--nnodes=2", "--nproc_per_node=2", "--rdzv_backend=c10d",
            f"--rdzv_endpoint={endpoint}", "--rdzv_id=test", "--max_restarts=0", *extra, PROGRAM]
    return net.run_all(argv, hosts, str(ROOT), NODE_TIMEOUT_S, env_per_node)


TORCHRUN_JSC = [PYTHON, "-m", "launcher.task.torchrun_jsc"]
TORCHRUN = [PYTHON, "-m", "torch.distributed.run"]  # = torchrun (torch 1.9 has no script)
SLURM = {n: {"SLURM_NODEID": str(i), "SLURM_JOB_ID": "42"} for i, n in enumerate(jscnet.NODES)}


@pytest.fixture(scope="module")
def release() -> str:
    """The torch release PYTHON runs (what every COLLECTIVES_OK line must report)."""
    p = subprocess.run([PYTHON, "-c", "import torch; print(torch.__version__)"],
                       capture_output=True, text=True, timeout=120, check=True)
    return p.stdout.strip()


def assert_all_ok(results, release):
    for rc, out in results:
        assert rc == 0, out[-3000:]
        assert out.count("COLLECTIVES_OK") == 2, out[-3000:]
        assert "world=4 sum=10 gather=[0, 1, 2, 3]" in out
        assert out.count(f"torch={release}") == 2, out[-3000:]


def test_plain_torchrun_fails_on_jsc_network(net):
    # A short read_timeout keeps the failure fast (default: two 60 s store connects).
    results = launch(net, TORCHRUN, "tjsc0001i:29611", net.hosts_jsc,
                     extra=("--rdzv_conf=read_timeout=5,join_timeout=20",))
    assert all(rc != 0 for rc, _ in results), results
    assert not any("COLLECTIVES_OK" in out for _, out in results)


def test_torchrun_jsc_passes_with_slurm_nodeid(net, release):
    results = launch(net, TORCHRUN_JSC, "tjsc0001i:29612", net.hosts_jsc, SLURM)
    assert_all_ok(results, release)
    host_out, peer_out = results[0][1], results[1][1]
    assert "is_host=True (network" in host_out and "is_host=False (network" in peer_out
    assert "local_addr=10.77.1.2" in peer_out
    assert "gloo_ifname=tjsc0002i" in peer_out
    # torch < 2.5 has no --local_addr: the one compat module stands in, and says so
    old = torch_version(release) < (2, 5)
    assert ("old-torch fallback" in peer_out) == old, peer_out[-3000:]


def test_torchrun_jsc_passes_without_slurm(net, release):
    assert_all_ok(launch(net, TORCHRUN_JSC, "tjsc0001i:29613", net.hosts_jsc), release)


@pytest.mark.parametrize("prefer,port", [({"TORCHRUN_JSC_PREFER_OLD_SOLUTION": "1"}, 29619),
                                         ({"TORCHRUN_JSC_PREFER_ARG_PATCHING": "0"}, 29620)],
                         ids=["prefer_old_solution", "prefer_arg_patching_0"])
def test_torchrun_jsc_passes_with_the_old_solution_asked_for(net, release, prefer, port):
    """The monkey-patching path on every torch, as JSC's torchrun_jsc package's variables ask."""
    env = {n: {**e, **prefer} for n, e in SLURM.items()}
    results = launch(net, TORCHRUN_JSC, f"tjsc0001i:{port}", net.hosts_jsc, env)
    assert_all_ok(results, release)
    assert "old-torch fallback" in results[1][1], results[1][1][-3000:]


@pytest.mark.parametrize("argv", [
    ["--nnodes=2", "--rdzv_endpoint=jwb0001i:29500", "t.py", "--lr", "1"],
    ["--standalone", "--nproc_per_node=2", "--no_python", "hostname"],
    ["--nnodes=2", "t.py", "--use_env"],  # the script's own
])
def test_namespace_matches_this_torchs_own_parse_args(argv):
    """Issue 30: with PYTHON's torch (1.9 under make test's oldest-torch run), torchrun_jsc's
    namespace is the one torch's own entry point builds, legacy options included."""
    code = ("import sys, json; from torch.distributed import run as r; "
            "from launcher.task.torchrun_jsc import usage; a = sys.argv[1:]; "
            "print(json.dumps([sorted(vars(usage.parser(r).parse_args(a)).items()), "
            "sorted(vars(r.parse_args(a)).items())], default=str))")
    p = subprocess.run([PYTHON, "-c", code, *argv], cwd=ROOT, capture_output=True, text=True,
                       timeout=120, check=False)
    assert p.returncode == 0, p.stderr[-3000:]
    import json
    ours, torchs = json.loads(p.stdout)
    assert ours == torchs


def test_endpoint_on_second_node(net, release):
    """The store host need not be node rank 0, and SLURM_NODEID may point elsewhere."""
    results = launch(net, TORCHRUN_JSC, "tjsc0002i:29614", net.hosts_jsc, SLURM)
    assert_all_ok(results, release)
    assert "network wins" in results[0][1] and "is_host=True" in results[1][1]


@pytest.mark.parametrize("launcher", [TORCHRUN, TORCHRUN_JSC], ids=["torchrun", "torchrun_jsc"])
def test_control_hostname_endpoint_on_shared_segment(net, release, launcher):
    assert_all_ok(launch(net, launcher, "tjsc0001:29615", net.hosts_shared), release)


def test_debian_hosts_put_loopback_first(net):
    """The premise of the next test: with Debian's /etc/hosts and `multi on`, the host node's
    own name resolves to 127.0.1.1 first, then to its cluster address."""
    p = subprocess.run(net.command("tjsc0001", ["getent", "ahosts", "tjsc0001"],
                                   net.hosts_debian), capture_output=True, text=True, timeout=30)
    addrs = [line.split()[0] for line in p.stdout.splitlines()]
    assert addrs[0] == "127.0.1.1" and "172.31.0.1" in addrs, p.stdout


@pytest.mark.parametrize("launcher", [TORCHRUN, TORCHRUN_JSC], ids=["torchrun", "torchrun_jsc"])
def test_debian_hosts_generic_site(net, release, launcher):
    """Site generic: the endpoint is the first node's plain hostname, which that node maps to
    127.0.1.1 as well. torchrun passes; torchrun_jsc must too (it published 127.0.0.1).

    Plain torchrun gets GLOO_SOCKET_IFNAME (as a site profile would set it): without it gloo's
    default device binds the hostname's first address, 127.0.1.1, whatever the launcher does.
    torchrun_jsc gets nothing: it sets the interface for the workers itself."""
    gloo = {n: {"GLOO_SOCKET_IFNAME": f"{n}i"} for n in net.nodes}
    results = launch(net, launcher, "tjsc0001:29616", net.hosts_debian,
                     gloo if launcher is TORCHRUN else None)
    assert_all_ok(results, release)
    assert not any("master=127." in out for _, out in results)
    if launcher is TORCHRUN_JSC:
        host_out, peer_out = results[0][1], results[1][1]
        assert ("is_host=True (network: tjsc0001 -> 172.31.0.1 is on this machine "
                "(ignored: 127.0.1.1))") in host_out
        assert "local_addr=172.31.0.1 (source address towards 172.31.0.1 via tjsc0001i)" \
            in host_out
        assert "local_addr=172.31.0.2 (source address towards 172.31.0.1 via tjsc0002i)" \
            in peer_out


def test_aaaa_and_a_endpoint_picks_ipv4(net, release):
    """tjsc0001d has an AAAA (on the link, returned first) and an A record: IPv4 wins."""
    results = launch(net, TORCHRUN_JSC, "tjsc0001d:29617", net.hosts_jsc)
    assert_all_ok(results, release)
    host_out, peer_out = results[0][1], results[1][1]
    assert "is_host=True (network: tjsc0001d -> 10.77.1.1, fd77::1 are on this machine)" \
        in host_out
    assert "local_addr=10.77.1.2 (source address towards 10.77.1.1 via tjsc0002i)" in peer_out
    assert "GLOO_SOCKET_IFNAME=tjsc0002i (set for workers)" in peer_out
    assert "NCCL_SOCKET_IFNAME==tjsc0002i (set for workers)" in peer_out  # exact match form


def test_address_family_override_ipv6(net, release):
    """TORCHRUN_JSC_ADDRESS_FAMILY=ipv6: the same name, now over its AAAA record."""
    env = {n: {"TORCHRUN_JSC_ADDRESS_FAMILY": "ipv6"} for n in net.nodes}
    results = launch(net, TORCHRUN_JSC, "tjsc0001d:29618", net.hosts_jsc, env)
    if torch_version(release) < (1, 11):  # its store listens on IPv4 only: one line, at once
        for (rc, out), addr in zip(results, ("fd77::1", "fd77::2")):
            assert rc == 2, out[-3000:]
            assert f"torchrun_jsc: error: local address {addr} is IPv6, but torch " in out, out
            assert "listens on IPv4 only (torch < 1.11)" in out, out
        return
    assert_all_ok(results, release)
    assert "is_host=True (network: tjsc0001d -> fd77::1 is on this machine (ignored: " \
        "10.77.1.1))" in results[0][1]
    assert "local_addr=fd77::2 (source address towards fd77::1 via tjsc0002i)" in results[1][1]


def test_unknown_name_fails_within_2_s(net):
    """The resolver deadline is 12 s, but a name that does not exist is answered at once."""
    code = ("import time; from launcher.task.torchrun_jsc import netinfo\n"
            "from launcher.task.torchrun_jsc.decide import Endpoint, LaunchError\n"
            "t = time.monotonic()\n"
            "try: netinfo.resolve(Endpoint('nosuchhost.invalid', 1))\n"
            "except LaunchError as e: print('ERR', e)\n"
            "print('ELAPSED', time.monotonic() - t)")
    p = subprocess.run(net.command("tjsc0002", [PYTHON, "-c", code], net.hosts_jsc), cwd=ROOT,
                       capture_output=True, text=True, timeout=30)
    assert "ERR --rdzv_endpoint: host 'nosuchhost.invalid' does not resolve" in p.stdout, p
    assert float(p.stdout.split("ELAPSED")[1]) < 2.0, p.stdout


@pytest.mark.parametrize("endpoint,msg", [
    ("nosuchhost.invalid:29400", "does not resolve"),
    ("tjsc0001i:70000", "bad port '70000'"),
    ("tjscmixed:29400", "addresses on this machine (10.77.1.2) and not on it (10.77.1.1)"),
])
def test_bad_endpoint_fails_fast_with_one_line(net, endpoint, msg):
    argv = [*TORCHRUN_JSC, "--nnodes=2", "--rdzv_backend=c10d", f"--rdzv_endpoint={endpoint}",
            PROGRAM]
    start = time.monotonic()
    p = subprocess.run(net.command("tjsc0002", argv, net.hosts_jsc), cwd=ROOT, timeout=30,
                       capture_output=True, text=True)
    elapsed = time.monotonic() - start
    assert p.returncode == 2
    errors = [line for line in p.stderr.splitlines() if line.startswith("torchrun_jsc:")]
    assert len(errors) == 1 and msg in errors[0] and endpoint.split(":")[0] in errors[0]
    assert "Traceback" not in p.stderr
    print(f"failed in {elapsed:.2f} s")
