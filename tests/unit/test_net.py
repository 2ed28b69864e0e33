"""Ring 1: the one address and interface rule (launcher/node/net) on fakes (no torch, no real DNS):
the pure rule, resolving, torchrun_jsc's probe, and one table of cases run through the task
scripts' entry point both as imported and through the kit's entry ``launcher/node/run.py
net-env`` (what launcher/node/task.sh runs).

getaddrinfo, the interface list and the source-address lookup are injected; only
``interface_addresses`` and ``source_address`` also run once for real, on loopback.
"""

from __future__ import annotations

import os
import socket
import time
from typing import Dict, List, Optional

import pytest

from launcher import kit
from launcher.node.net import probe as netprobe
from launcher.node.net.addresses import (DEFAULT_RESOLVE_TIMEOUT_S, LaunchError, address_family,
                                    candidates, is_loopback, resolve_timeout)
from launcher.task.torchrun_jsc import netinfo
from launcher.task.torchrun_jsc.decide import Endpoint

EP = Endpoint("node0", 29400)


def gai(*addrs: str) -> List[tuple]:
    """What getaddrinfo returns for these addresses (SOCK_STREAM)."""
    out = []
    for a in addrs:
        if ":" in a:
            out.append((socket.AF_INET6, socket.SOCK_STREAM, 6, "", (a, 29400, 0, 0)))
        else:
            out.append((socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, 29400)))
    return out


@pytest.fixture
def fake_net(monkeypatch):
    """Install fakes: set .answer (list or exception), .local, .routes (target -> source)."""
    class Net:
        answer: object = []
        local: Dict[str, str] = {}
        routes: Dict[str, Optional[str]] = {}
        asked: List[str] = []

    net = Net()

    def getaddrinfo(host, port, *args, **kwargs):
        if isinstance(net.answer, Exception):
            raise net.answer
        return net.answer

    def source_address(addr: str, port: int) -> Optional[str]:
        net.asked.append(addr)
        return net.routes.get(addr)

    monkeypatch.setattr(netprobe.socket, "getaddrinfo", getaddrinfo)
    monkeypatch.setattr(netprobe, "interface_addresses", lambda: dict(net.local))
    monkeypatch.setattr(netprobe, "source_address", source_address)
    net.asked = []
    return net


# --- the pure rule -------------------------------------------------------------------------

@pytest.mark.parametrize("addr,loop", [
    ("127.0.0.1", True), ("127.0.1.1", True), ("::1", True), ("::ffff:127.0.1.1", True),
    ("10.0.0.1", False), ("172.31.0.1", False), ("fd00::1", False), ("fe80::1%eth0", False),
])
def test_is_loopback(addr, loop):
    assert is_loopback(addr) is loop


@pytest.mark.parametrize("addrs,family,want", [
    (("127.0.1.1", "172.31.0.1"), "auto", ("172.31.0.1",)),        # Debian hosts
    (("::1", "127.0.0.1"), "auto", ("127.0.0.1", "::1")),          # only loopback: kept
    (("fd00::1", "10.0.0.1"), "auto", ("10.0.0.1", "fd00::1")),    # IPv4 first
    (("fd00::1", "fd00::2"), "auto", ("fd00::1", "fd00::2")),      # IPv6 only
    (("fd00::1", "10.0.0.1"), "any", ("fd00::1", "10.0.0.1")),     # resolver order
    (("fd00::1", "127.0.1.1", "10.0.0.1"), "ipv4", ("10.0.0.1",)),
    (("fd00::1", "::1", "10.0.0.1"), "ipv6", ("fd00::1",)),
])
def test_candidates(addrs, family, want):
    assert candidates("node0", addrs, family) == want


def test_candidates_family_leaves_nothing():
    with pytest.raises(LaunchError, match=r"host 'node0' has no IPv4 address "
                       r"\(TORCHRUN_JSC_ADDRESS_FAMILY=ipv4\); it resolves to fd00::1"):
        candidates("node0", ("fd00::1",), "ipv4")


@pytest.mark.parametrize("value,want", [
    (None, "auto"), ("", "auto"), ("ipv4", "ipv4"), (" IPv6 ", "ipv6"), ("any", "any"),
    ("auto", "auto")])
def test_address_family(value, want):
    env = {} if value is None else {"TORCHRUN_JSC_ADDRESS_FAMILY": value}
    assert address_family(env) == want


def test_address_family_bad_value():
    with pytest.raises(LaunchError, match=r"^TORCHRUN_JSC_ADDRESS_FAMILY: expected one of "
                       r"auto, ipv4, ipv6, any, got 'inet'$"):
        address_family({"TORCHRUN_JSC_ADDRESS_FAMILY": "inet"})


@pytest.mark.parametrize("value,want", [(None, 12.0), ("", 12.0), ("30", 30.0), ("0.5", 0.5)])
def test_resolve_timeout(value, want):
    env = {} if value is None else {"TORCHRUN_JSC_RESOLVE_TIMEOUT": value}
    assert resolve_timeout(env) == want


def test_default_timeout_survives_one_lost_dns_packet():
    assert DEFAULT_RESOLVE_TIMEOUT_S > 2 * 5  # glibc resends a lost query after 5 s


@pytest.mark.parametrize("value", ["0", "-1", "abc", "nan", "inf", "1s"])
def test_resolve_timeout_bad_value(value):
    with pytest.raises(LaunchError) as e:
        resolve_timeout({"TORCHRUN_JSC_RESOLVE_TIMEOUT": value})
    assert str(e.value) == (f"TORCHRUN_JSC_RESOLVE_TIMEOUT: expected a number of seconds > 0, "
                            f"got {value!r}")


# --- resolve ------------------------------------------------------------------------------

def test_resolve_keeps_order_drops_duplicates_scope_and_other_families(fake_net):
    fake_net.answer = gai("127.0.1.1", "172.31.0.1", "fe80::1%eth0", "172.31.0.1") + [
        (socket.AF_UNIX, socket.SOCK_STREAM, 0, "", "/x")]
    assert netinfo.resolve(EP) == ("127.0.1.1", "172.31.0.1", "fe80::1")


def test_resolve_no_ip_address(fake_net):
    fake_net.answer = [(socket.AF_UNIX, socket.SOCK_STREAM, 0, "", "/x")]
    with pytest.raises(LaunchError, match="'node0' has no IPv4/IPv6 address"):
        netinfo.resolve(EP)


@pytest.mark.parametrize("error,cause", [
    (socket.gaierror(socket.EAI_NONAME, "Name or service not known"), "Name or service not known"),
    (UnicodeError("label too long"), "label too long"),
])
def test_resolve_failure_is_one_line_and_fast(fake_net, error, cause):
    """A name that does not exist is answered at once: the 12 s deadline is not waited for."""
    fake_net.answer = error
    start = time.monotonic()
    with pytest.raises(LaunchError, match=f"host 'node0' does not resolve: {cause}"):
        netinfo.resolve(EP)
    assert time.monotonic() - start < 2.0


def test_resolve_deadline(monkeypatch):
    monkeypatch.setattr(netprobe.socket, "getaddrinfo", lambda *a, **k: time.sleep(5))
    start = time.monotonic()
    with pytest.raises(LaunchError, match=r"resolving 'node0' took longer than 0.2 s"):
        netinfo.resolve(EP, timeout=0.2)
    assert time.monotonic() - start < 2.0


# --- probe --------------------------------------------------------------------------------

def test_probe_debian_hosts_skips_loopback(fake_net):
    """The colleague's case: 127.0.1.1 first, the cluster address second, on the host node."""
    fake_net.answer = gai("127.0.1.1", "172.31.0.10")
    fake_net.local = {"127.0.0.1": "lo", "172.31.0.10": "eth0"}
    fake_net.routes = {"127.0.1.1": "127.0.0.1", "172.31.0.10": "172.31.0.10"}
    facts = netinfo.probe(EP)
    assert fake_net.asked == ["172.31.0.10"]
    assert (facts.target, facts.source_addr, facts.source_ifname) == (
        "172.31.0.10", "172.31.0.10", "eth0")
    assert facts.addresses == ("127.0.1.1", "172.31.0.10")
    assert facts.local_matches == ("172.31.0.10",)


@pytest.mark.parametrize("family,target,source,ifname", [
    ("auto", "10.0.0.1", "10.0.0.2", "ib0"),
    ("ipv4", "10.0.0.1", "10.0.0.2", "ib0"),
    ("any", "fd00::1", "fd00::2", "ib6"),
    ("ipv6", "fd00::1", "fd00::2", "ib6"),
])
def test_probe_aaaa_and_a(fake_net, family, target, source, ifname):
    fake_net.answer = gai("fd00::1", "10.0.0.1")
    fake_net.local = {"10.0.0.2": "ib0", "fd00::2": "ib6"}
    fake_net.routes = {"10.0.0.1": "10.0.0.2", "fd00::1": "fd00::2"}
    facts = netinfo.probe(EP, family)
    assert (facts.target, facts.source_addr, facts.source_ifname, facts.family) == (
        target, source, ifname, family)
    assert facts.local_matches == ()


def test_probe_ipv6_only(fake_net):
    fake_net.answer = gai("fd00::1")
    fake_net.local = {"fd00::2": "ib6"}
    fake_net.routes = {"fd00::1": "fd00::2"}
    facts = netinfo.probe(EP)
    assert (facts.target, facts.source_addr, facts.source_ifname) == ("fd00::1", "fd00::2", "ib6")


def test_probe_next_candidate_when_no_route(fake_net):
    fake_net.answer = gai("10.0.0.1", "10.1.0.1")
    fake_net.local = {"10.1.0.2": "eth1"}
    fake_net.routes = {"10.1.0.1": "10.1.0.2"}
    facts = netinfo.probe(EP)
    assert fake_net.asked == ["10.0.0.1", "10.1.0.1"]
    assert (facts.target, facts.source_ifname) == ("10.1.0.1", "eth1")


def test_probe_no_route_at_all(fake_net):
    fake_net.answer = gai("10.0.0.1")
    facts = netinfo.probe(EP)
    assert (facts.target, facts.source_addr, facts.source_ifname) == (None, None, None)
    assert facts.addresses == ("10.0.0.1",)


def test_probe_only_loopback(fake_net):
    fake_net.answer = gai("127.0.0.1")
    fake_net.local = {"127.0.0.1": "lo"}
    fake_net.routes = {"127.0.0.1": "127.0.0.1"}
    facts = netinfo.probe(EP)
    assert facts.all_loopback and facts.source_ifname == "lo"


def test_probe_family_leaves_nothing(fake_net):
    fake_net.answer = gai("fd00::1")
    with pytest.raises(LaunchError, match="has no IPv4 address"):
        netinfo.probe(EP, "ipv4")


# --- the two system calls, for real on loopback -------------------------------------------

def test_interface_addresses_real():
    assert netprobe.interface_addresses().get("127.0.0.1") == "lo"


def test_source_address_real_loopback():
    assert netprobe.source_address("127.0.0.1", 9) == "127.0.0.1"


def test_source_address_unreachable(monkeypatch):
    class NoRoute(socket.socket):
        def connect(self, address):
            raise OSError(101, "Network is unreachable")

    monkeypatch.setattr(netprobe.socket, "socket", NoRoute)
    assert netprobe.source_address("10.255.0.1", 1) is None


# --- one table of cases through the task scripts' entry point ------------------------------

# This node: 10.0.0.2 on ib0, fd00::2 on ib6, 172.31.0.10 on eth0, loopback. Routes: target ->
# the source address the kernel would pick (absent: no route).
LOCAL = {"127.0.0.1": "lo", "10.0.0.2": "ib0", "fd00::2": "ib6", "172.31.0.10": "eth0"}
ROUTES = {"10.0.0.1": "10.0.0.2", "fd00::1": "fd00::2", "127.0.0.1": "127.0.0.1",
          "127.0.1.1": "127.0.0.1", "10.0.0.2": "10.0.0.2", "172.31.0.1": "172.31.0.10"}
NOT_KNOWN = socket.gaierror(socket.EAI_NONAME, "Name or service not known")


def exports(**values: str) -> str:
    return "".join(f"export {k}={v}\n" for k, v in values.items())


# (case, what node0i resolves to, environment, extra args) -> (exit status, stdout, stderr)
TABLE = [
    ("one address", gai("10.0.0.1"), {}, [],
     (0, exports(GLOO_SOCKET_IFNAME="ib0", NCCL_SOCKET_IFNAME="=ib0"), "")),
    ("Debian hosts: loopback first", gai("127.0.1.1", "10.0.0.1"), {}, [],
     (0, exports(GLOO_SOCKET_IFNAME="ib0", NCCL_SOCKET_IFNAME="=ib0"), "")),
    ("AAAA first, A wins", gai("fd00::1", "10.0.0.1"), {}, [],
     (0, exports(GLOO_SOCKET_IFNAME="ib0", NCCL_SOCKET_IFNAME="=ib0"), "")),
    ("family ipv6", gai("fd00::1", "10.0.0.1"), {"TORCHRUN_JSC_ADDRESS_FAMILY": "ipv6"}, [],
     (0, exports(GLOO_SOCKET_IFNAME="ib6", NCCL_SOCKET_IFNAME="=ib6"), "")),
    ("family any: resolver order", gai("fd00::1", "10.0.0.1"),
     {"TORCHRUN_JSC_ADDRESS_FAMILY": "any"}, [],
     (0, exports(GLOO_SOCKET_IFNAME="ib6", NCCL_SOCKET_IFNAME="=ib6"), "")),
    ("family IPv4, any case", gai("fd00::1", "127.0.1.1", "10.0.0.1"),
     {"TORCHRUN_JSC_ADDRESS_FAMILY": " IPv4 "}, [],
     (0, exports(GLOO_SOCKET_IFNAME="ib0", NCCL_SOCKET_IFNAME="=ib0"), "")),
    ("IPv6 only", gai("fd00::1"), {}, [],
     (0, exports(GLOO_SOCKET_IFNAME="ib6", NCCL_SOCKET_IFNAME="=ib6"), "")),
    ("loopback only: kept", gai("127.0.0.1"), {}, [],
     (0, exports(GLOO_SOCKET_IFNAME="lo", NCCL_SOCKET_IFNAME="=lo"), "")),
    ("partly local: the first candidate, this node own", gai("10.0.0.2", "10.0.0.1"), {}, [],
     (0, exports(GLOO_SOCKET_IFNAME="ib0", NCCL_SOCKET_IFNAME="=ib0"), "")),
    ("first candidate unrouted: the next", gai("10.9.0.1", "172.31.0.1"), {}, [],
     (0, exports(GLOO_SOCKET_IFNAME="eth0", NCCL_SOCKET_IFNAME="=eth0"), "")),
    ("MPI variables too", gai("10.0.0.1"), {"HOROVOD_GLOO_IFACE": "ib3"}, ["--mpi"],
     (0, exports(GLOO_SOCKET_IFNAME="ib0", NCCL_SOCKET_IFNAME="=ib0",
                 OMPI_MCA_btl_tcp_if_include="ib0"), "")),
    ("user GLOO kept, nothing resolved", NOT_KNOWN, {"GLOO_SOCKET_IFNAME": "eth7"}, ["--mpi"],
     (0, exports(NCCL_SOCKET_IFNAME="=eth7", OMPI_MCA_btl_tcp_if_include="eth7",
                 HOROVOD_GLOO_IFACE="eth7"), "")),
    ("user values all kept", NOT_KNOWN,
     {"GLOO_SOCKET_IFNAME": "eth7", "NCCL_SOCKET_IFNAME": "ib3"}, [], (0, "", "")),
    ("unresolvable: no fallback", NOT_KNOWN, {}, [],
     (1, "", "MASTER_ADDR: host 'node0i' does not resolve: Name or service not known\n")),
    ("family leaves nothing", gai("fd00::1"), {"TORCHRUN_JSC_ADDRESS_FAMILY": "ipv4"}, [],
     (1, "", "MASTER_ADDR: host 'node0i' has no IPv4 address (TORCHRUN_JSC_ADDRESS_FAMILY="
      "ipv4); it resolves to fd00::1\n")),
    ("bad family value", gai("10.0.0.1"), {"TORCHRUN_JSC_ADDRESS_FAMILY": "inet"}, [],
     (1, "", "TORCHRUN_JSC_ADDRESS_FAMILY: expected one of auto, ipv4, ipv6, any, got "
      "'inet'\n")),
    ("no route at all", gai("10.9.0.1"), {}, [],
     (1, "", "no interface reaches MASTER_ADDR=node0i\n")),
]


def _imported(monkeypatch):
    return netprobe.task_env_main, netprobe


def _node_run():
    """launcher/node/run.py as a module (not __main__: no entry call, the kit not reloaded)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("jsc_test_node_run",
                                                  kit.installed() / "node" / "run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _entry(monkeypatch):
    """``run.py net-env ARGS`` as the task script calls it: the command table, the
    environment from os.environ."""
    run = _node_run()

    def main(argv, env):
        monkeypatch.setattr(os, "environ", dict(env))  # restored at teardown
        return run.dispatch(run.COMMANDS, ["net-env", *argv], "run.py")
    return main, netprobe


@pytest.mark.parametrize("form", [_imported, _entry], ids=["imported", "run.py"])
@pytest.mark.parametrize("case,answer,env,args,want", TABLE, ids=[t[0] for t in TABLE])
def test_task_env_table(monkeypatch, capsys, form, case, answer, env, args, want):
    def getaddrinfo(host, port, *a, **k):
        assert host == "node0i"
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    main, where = form(monkeypatch)
    setter = monkeypatch.setitem if isinstance(where, dict) else monkeypatch.setattr
    setter(where, "interface_addresses", lambda: dict(LOCAL))
    setter(where, "source_address", lambda addr, port: ROUTES.get(addr))
    rc = main([*args, "node0i"], env)
    out, err = capsys.readouterr()
    assert (rc, out, err) == want


def test_task_env_without_master_addr(capsys):
    assert netprobe.task_env_main([""], {}) == 1
    assert capsys.readouterr().err == ("MASTER_ADDR is not set: the task script picks the "
                                       "socket interface that reaches it\n")


def test_node_run_net_env_runs_alone_for_real(tmp_path):
    """python3 -I KIT/node/run.py net-env HOST, as launcher/node/task.sh runs it, on this
    machine from another directory: localhost -> lo."""
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-I", str(kit.installed() / "node" / "run.py"),
                           "net-env", "localhost"], cwd=tmp_path,
                          capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"},
                          timeout=30)
    assert (done.returncode, done.stdout, done.stderr) == (
        0, exports(GLOO_SOCKET_IFNAME="lo", NCCL_SOCKET_IFNAME="=lo"), "")
