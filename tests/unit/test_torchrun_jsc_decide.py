"""Ring 1: the torchrun_jsc patch decision as a table (no torch, no network)."""

import argparse

import pytest

from launcher.task.torchrun_jsc.decide import (
    Endpoint, LaunchError, NetFacts, Request, apply, decide, describe, parse_endpoint)

EP = "jwb0001i:29400"
HOST_NET = NetFacts(("10.67.0.1",), ("10.67.0.1",), "10.67.0.1", "jwb0001i")
PEER_NET = NetFacts(("10.67.0.1",), (), "10.67.0.2", "jwb0002i")
LOOP_NET = NetFacts(("127.0.0.1",), ("127.0.0.1",), "127.0.0.1", "lo")
# Debian/Ubuntu /etc/hosts: the own hostname is 127.0.1.1 too, and glibc returns it first.
DEBIAN_HOST = NetFacts(("127.0.1.1", "172.31.0.1"), ("172.31.0.1",), "172.31.0.1", "eth0",
                       target="172.31.0.1")
DEBIAN_PEER = NetFacts(("172.31.0.1",), (), "172.31.0.2", "eth0", target="172.31.0.1")
# AAAA and A records, the resolver's IPv6 first: IPv4 counts, and its interface.
DUAL_HOST = NetFacts(("fd00::1", "10.67.0.1"), ("fd00::1", "10.67.0.1"), "10.67.0.1",
                     "jwb0001i", target="10.67.0.1")
DUAL_PEER = NetFacts(("fd00::1", "10.67.0.1"), (), "10.67.0.2", "jwb0002i", target="10.67.0.1")
V6_PEER = NetFacts(("fd00::1",), (), "fd00::2", "jwb0002i", target="fd00::1")
# The A record is on this machine, the AAAA is not (a stale entry, another node's address).
PARTIAL = NetFacts(("fd00::9", "10.67.0.1"), ("10.67.0.1",), "10.67.0.1", "jwb0001i",
                   target="10.67.0.1")
PARTIAL_V4 = NetFacts(PARTIAL.addresses, PARTIAL.local_matches, "10.67.0.1", "jwb0001i",
                      family="ipv4", target="10.67.0.1")


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
    ("debian hosts: loopback skipped on the host", req(endpoint="node0:1"), DEBIAN_HOST, True,
     "network: node0 -> 172.31.0.1 is on this machine (ignored: 127.0.1.1)", "172.31.0.1"),
    ("debian hosts: peer", req(endpoint="node0:1"), DEBIAN_PEER, False,
     "network: node0 -> 172.31.0.1 not on this machine", "172.31.0.2"),
    ("AAAA+A on the host", req(), DUAL_HOST, True,
     "network: jwb0001i -> 10.67.0.1, fd00::1 are on this machine", "10.67.0.1"),
    ("AAAA+A on a peer: IPv4 source", req(), DUAL_PEER, False,
     "network: jwb0001i -> 10.67.0.1, fd00::1 not", "10.67.0.2"),
    ("IPv6 only", req(), V6_PEER, False, "network: jwb0001i -> fd00::1 not", "fd00::2"),
    ("partial, is_host given: network not asked", req(conf="is_host=1"), PARTIAL, True,
     "rdzv_conf", "10.67.0.1"),
    ("partial in IPv6 only, family ipv4", req(), PARTIAL_V4, True,
     "network: jwb0001i -> 10.67.0.1 is on this machine (ignored: fd00::9)", "10.67.0.1"),
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


@pytest.mark.parametrize("version", [(1, 9), (2, 4), (2, 5), (2, 13), (3, 0)])
@pytest.mark.parametrize("supported", [True, False])
def test_old_torch_fallback_by_feature_not_version(version, supported):
    """compat.supports_local_addr decides (a 2.5.0a0 build may lack #135262)."""
    r = Request(rdzv_backend="c10d", rdzv_endpoint=EP, torch_version=version,
                local_addr_supported=supported)
    d = decide(r, PEER_NET)
    old = not supported
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
    # NCCL matches a prefix (ib0 also matches ib01): "=NAME" is exact; gloo takes the name.
    assert dict(decide(req(), PEER_NET).worker_env) == {
        "GLOO_SOCKET_IFNAME": "jwb0002i", "NCCL_SOCKET_IFNAME": "=jwb0002i"}
    d = decide(req({"NCCL_SOCKET_IFNAME": "ib0"}), PEER_NET)
    assert dict(d.worker_env) == {"GLOO_SOCKET_IFNAME": "jwb0002i"}
    # Your GLOO_SOCKET_IFNAME is NCCL's too (launcher/node/net's one rule, as in the task scripts).
    d = decide(req({"GLOO_SOCKET_IFNAME": "eth1"}), PEER_NET)
    assert dict(d.worker_env) == {"NCCL_SOCKET_IFNAME": "=eth1"}
    d = decide(req({"GLOO_SOCKET_IFNAME": "", "NCCL_SOCKET_IFNAME": ""}), PEER_NET)
    assert dict(d.worker_env) == {"GLOO_SOCKET_IFNAME": "jwb0002i",
                                  "NCCL_SOCKET_IFNAME": "=jwb0002i"}  # empty counts as unset
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


def test_partly_local_endpoint_refused_naming_both():
    with pytest.raises(LaunchError) as e:
        decide(req(), PARTIAL)
    msg = str(e.value)
    assert "\n" not in msg and "'jwb0001i'" in msg
    assert "on this machine (10.67.0.1) and not on it (fd00::9)" in msg


def test_family_that_leaves_nothing_refused():
    with pytest.raises(LaunchError, match=r"'jwb0001i' has no IPv6 address "
                       r"\(TORCHRUN_JSC_ADDRESS_FAMILY=ipv6\); it resolves to 10.67.0.1"):
        decide(req(), NetFacts(("10.67.0.1",), (), "10.67.0.2", "jwb0002i", family="ipv6"))


def test_log_line_names_the_target_and_interface():
    line = describe(decide(req(), DUAL_PEER), EP)
    assert "local_addr=10.67.0.2 (source address towards 10.67.0.1 via jwb0002i)" in line
    assert "NCCL_SOCKET_IFNAME==jwb0002i (set for workers)" in line


V6_PEER_ASKED = NetFacts(("fd00::1",), (), "fd00::2", "jwb0002i", family="ipv6",
                         target="fd00::1")


@pytest.mark.parametrize("version", [(1, 9), (1, 10)])
def test_ipv6_never_published_where_the_store_serves_ipv4_only(version):
    """Issue 30: torch < 1.11's TCPStore listens on IPv4 only (torch 1.9/1.10 in the lab:
    'connect() timed out' at MASTER_ADDR=fd77::1). Asked for IPv6: one line; else torch's
    own choice (its FQDN), as plain torchrun would."""
    with pytest.raises(LaunchError, match=r"^local address fd00::2 is IPv6, but torch 1\.\d+'s "
                       r"rendezvous store \(MASTER_ADDR\) listens on IPv4 only"):
        decide(req(version=version), V6_PEER_ASKED)
    with pytest.raises(LaunchError, match="listens on IPv4 only"):
        decide(req(version=version, local_addr="fd00::2"), PEER_NET)
    d = decide(req(version=version), V6_PEER)
    assert d.local_addr is None and "store serves IPv4 only, not fd00::2" in d.local_addr_source
    assert d.worker_env == ()  # the interface belongs to the address not published
    assert decide(req(version=version), PEER_NET).local_addr == "10.67.0.2"  # IPv4: as before
    assert decide(req(version=(1, 11)), V6_PEER_ASKED).local_addr == "fd00::2"
