"""Ring 1: the torchrun_jsc patch decision as a table (no torch, no network)."""

import argparse

import pytest

from launcher.torchrun_jsc.decide import (
    Endpoint, LaunchError, NetFacts, Request, apply, decide, describe, parse_endpoint)

pytestmark = pytest.mark.ring1

EP = "jwb0001i:29400"
HOST_NET = NetFacts(("10.67.0.1",), ("10.67.0.1",), "10.67.0.1", "jwb0001i")
PEER_NET = NetFacts(("10.67.0.1",), (), "10.67.0.2", "jwb0002i")
LOOP_NET = NetFacts(("127.0.0.1",), ("127.0.0.1",), "127.0.0.1", "lo")


def req(env=None, conf="", local_addr=None, endpoint=EP, backend="c10d", standalone=False,
        version=(2, 13)):
    return Request(rdzv_backend=backend, rdzv_endpoint=endpoint, rdzv_conf=conf,
                   local_addr=local_addr, standalone=standalone, env=env or {},
                   torch_version=version)


# (name, request, network, expected is_host, expected is_host source prefix, local_addr)
TABLE = [
    ("host by network, no slurm", req(), HOST_NET, True, "network", "10.67.0.1"),
    ("peer by network, no slurm", req(), PEER_NET, False, "network", "10.67.0.2"),
    ("network beats SLURM_NODEID", req({"SLURM_NODEID": "0"}), PEER_NET, False, "network",
     "10.67.0.2"),
    ("endpoint host is node rank 3", req({"SLURM_NODEID": "3"}), HOST_NET, True, "network",
     "10.67.0.1"),
    ("explicit is_host wins", req({"TORCHRUN_JSC_NODE_RANK": "0"}, conf="is_host=false"),
     HOST_NET, False, "rdzv_conf", "10.67.0.1"),
    ("explicit node rank env wins over network", req({"TORCHRUN_JSC_NODE_RANK": "1"}), HOST_NET,
     False, "TORCHRUN_JSC_NODE_RANK", "10.67.0.1"),
    ("explicit host node rank with SLURM_NODEID",
     req({"TORCHRUN_JSC_HOST_NODE_RANK": "2", "SLURM_NODEID": "2"}), PEER_NET, True,
     "SLURM_NODEID", "10.67.0.2"),
    ("loopback: network cannot tell, slurm fallback", req({"SLURM_NODEID": "1"},
     endpoint="localhost:1"), LOOP_NET, False, "SLURM_NODEID", None),
    ("loopback and no slurm: left to torch", req(endpoint="localhost:1"), LOOP_NET, None,
     "left to torch", None),
    ("user local_addr kept", req(local_addr="jwb0002i"), PEER_NET, False, "network", "jwb0002i"),
]


@pytest.mark.parametrize("name,request_,net,is_host,src,local_addr", TABLE,
                         ids=[t[0] for t in TABLE])
def test_decision_table(name, request_, net, is_host, src, local_addr):
    d = decide(request_, net)
    assert d.patch
    assert d.is_host is is_host
    assert d.is_host_source.startswith(src)
    assert d.local_addr == local_addr


def test_disagreement_is_noted():
    d = decide(req({"SLURM_NODEID": "0"}), PEER_NET)
    assert any("network wins" in n for n in d.notes)
    assert "network wins" in describe(d, EP)


@pytest.mark.parametrize("r,why", [
    (req(standalone=True), "--standalone"),
    (req(backend="static"), "rdzv_backend=static"),
    (req(endpoint=""), "no --rdzv_endpoint"),
])
def test_passthrough(r, why):
    d = decide(r, HOST_NET)
    assert not d.patch and d.why.startswith(why)
    ns = argparse.Namespace(rdzv_conf="", local_addr=None)
    assert vars(apply(ns, d)) == vars(ns)


def test_old_torch_refused():
    with pytest.raises(LaunchError, match=r"torch 1.8 is too old.*>= 1.9"):
        decide(req(version=(1, 8)), HOST_NET)


@pytest.mark.parametrize("version,old", [((1, 9), True), ((2, 4), True), ((2, 5), False),
                                         ((2, 13), False), ((3, 0), False)])
def test_old_torch_fallback_by_version(version, old):
    d = decide(req(version=version), PEER_NET)
    assert d.old_torch_fallback is old
    ns = argparse.Namespace(rdzv_conf="", local_addr=None)
    assert apply(ns, d).local_addr == (None if old else "10.67.0.2")


def test_torch3_warns():
    assert any("newer than tested" in n for n in decide(req(version=(3, 0)), HOST_NET).notes)


@pytest.mark.parametrize("env", [{"TORCHRUN_JSC_PREFER_OLD_SOLUTION": "1"},
                                 {"TORCHRUN_JSC_PREFER_ARG_PATCHING": "false"}])
def test_compat_variables_select_old_solution(env):
    assert decide(req(env), PEER_NET).old_torch_fallback


def test_apply_appends_is_host_and_keeps_user_conf():
    d = decide(req(conf="read_timeout=5"), PEER_NET)
    ns = argparse.Namespace(rdzv_conf="read_timeout=5", local_addr=None, other=1)
    out = apply(ns, d)
    assert out.rdzv_conf == "read_timeout=5,is_host=false"
    assert out.local_addr == "10.67.0.2" and out.other == 1
    assert ns.rdzv_conf == "read_timeout=5" and ns.local_addr is None  # input untouched


def test_apply_never_overrides_user_values():
    d = decide(req(conf="is_host=1", local_addr="me"), HOST_NET)
    out = apply(argparse.Namespace(rdzv_conf="is_host=1", local_addr="me"), d)
    assert out.rdzv_conf == "is_host=1" and out.local_addr == "me"


def test_socket_ifname_set_only_when_unset():
    assert dict(decide(req(), PEER_NET).worker_env) == {
        "GLOO_SOCKET_IFNAME": "jwb0002i", "NCCL_SOCKET_IFNAME": "jwb0002i"}
    d = decide(req({"NCCL_SOCKET_IFNAME": "ib0"}), PEER_NET)
    assert dict(d.worker_env) == {"GLOO_SOCKET_IFNAME": "jwb0002i"}
    assert decide(req(endpoint="localhost:1"), LOOP_NET).worker_env == ()


@pytest.mark.parametrize("text,ep", [
    ("jwb0001i:29500", Endpoint("jwb0001i", 29500)),
    ("jwb0001i", Endpoint("jwb0001i", 29400)),
    ("10.0.0.1:0", Endpoint("10.0.0.1", 0)),
    ("[fd00::1]:29500", Endpoint("fd00::1", 29500)),
    ("[fd00::1]", Endpoint("fd00::1", 29400)),
])
def test_parse_endpoint(text, ep):
    assert parse_endpoint(text) == ep


@pytest.mark.parametrize("text,msg", [
    ("host:99999", "bad port '99999'"),
    ("host:abc", "bad port 'abc'"),
    ("host:", "bad port ''"),
    (":29500", "bad host"),
    ("fd00::1", "IPv6 address without brackets"),
    ("[fd00::1:29500", "malformed IPv6"),
    ("ho st:1", "bad host"),
])
def test_parse_endpoint_errors(text, msg):
    with pytest.raises(LaunchError, match=msg) as e:
        parse_endpoint(text)
    assert "\n" not in str(e.value) and repr(text) in str(e.value)


@pytest.mark.parametrize("env,msg", [
    ({"TORCHRUN_JSC_NODE_RANK": "x"}, "TORCHRUN_JSC_NODE_RANK: expected a non-negative integer"),
    ({"SLURM_NODEID": "-1"}, "SLURM_NODEID: expected a non-negative integer"),
    ({"TORCHRUN_JSC_PREFER_OLD_SOLUTION": "maybe"}, "expected a boolean"),
])
def test_bad_env_values(env, msg):
    with pytest.raises(LaunchError, match=msg):
        decide(req(env), PEER_NET)


def test_bad_rdzv_conf():
    with pytest.raises(LaunchError, match="malformed entry"):
        decide(req(conf="is_host"), PEER_NET)
