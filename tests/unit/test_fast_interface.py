"""Ring 1: the fast-network rule of a site without a profile (launcher/node/net/fast.py), on
faked /sys/class/net trees: IPoIB (type 32), Slingshot hsn*, the interface site.socket_ifname
names; the name kept where it is already on the fast network (JSC's `i` names, a Cray EX nid
name on its four hsn NICs), the fast address where the name is on a management network; the
jobscript line and the preview. Ring 2 runs the kit's function in bash on this machine."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path
from typing import Dict, Tuple

import pytest

from launcher import kit
from launcher.render.jobscript import render_jobscript
from launcher.node.net import fast
from launcher.node.net.fast import Nic, choose, named_by, nics
from launcher.render.preview import render_preview
from tests.unit.test_spec_traps import error, parse

SPEC = "job: {nodes: 2}\nsite: generic\nlaunch: {rdzv_port: 29400}\nprogram: [p]\n"


def sysfs(root: Path, devices: Dict[str, Tuple[int, str]]) -> str:
    """A /sys/class/net with NAME/type and NAME/operstate for each device."""
    for name, (kind, state) in devices.items():
        (root / name).mkdir(parents=True)
        (root / name / "type").write_text(f"{kind}\n")
        (root / name / "operstate").write_text(f"{state}\n")
    return str(root)


JUPITER = {"lo": (772, "unknown"), "eth0": (1, "up"), "ib0": (32, "up"), "ib1": (32, "up")}
JUPITER_ADDRS = {"127.0.0.1": "lo", "10.128.0.5": "eth0", "10.13.0.5": "ib0",
                 "10.14.0.5": "ib1"}
CRAY = {"lo": (772, "unknown"), "nmn0": (1, "up"), **{f"hsn{k}": (1, "up") for k in range(4)}}
CRAY_ADDRS = {"10.100.0.7": "nmn0", **{f"10.150.0.{7 + 64 * k}": f"hsn{k}" for k in range(4)}}


def test_the_tree_is_read_with_types_states_and_addresses(tmp_path):
    tree = sysfs(tmp_path, {**JUPITER, "ib2": (32, "down")})
    got = nics(JUPITER_ADDRS, tree)
    assert [n.name for n in got] == ["eth0", "ib0", "ib1", "ib2"]  # loopback left out
    assert got[1] == Nic("ib0", 32, True, ("10.13.0.5",))
    assert got[3] == Nic("ib2", 32, False, ())
    # no readable tree (a container without /sys): the address map's interfaces, typed by
    # the kernel (SIOCGIFHWADDR) where this machine has them, else unknown
    assert [(n.name, n.type) for n in nics(JUPITER_ADDRS, str(tmp_path / "none"))] == [
        ("eth0", fast.arphrd("eth0")), ("ib0", -1), ("ib1", -1)]
    assert fast.arphrd("lo") == 772 and fast.arphrd("no-such-nic") == -1


def test_a_tree_of_another_network_namespace_misses_nothing(tmp_path):
    """/sys mounted for another network namespace (the lab's nodes; a container) lists other
    interfaces: those holding addresses here still count, Slingshot by name."""
    tree = sysfs(tmp_path, {"eth0": (1, "up"), "docker0": (1, "up")})
    all_nics = nics(CRAY_ADDRS, tree)
    assert {"hsn0", "hsn3", "nmn0"} <= {n.name for n in all_nics}
    got = choose("nid000007", ["10.150.0.7", "10.150.0.71"], all_nics)
    assert got.host == "nid000007" and "10.150.0.7 on hsn0" in got.line and "(Slingshot, fast)" \
        in got.line


def test_name_on_management_network_gives_the_ipoib_address(tmp_path):
    """JUPITER-like: the plain name resolves to the management address (eth0): the first
    InfiniBand interface's address instead, and the line says which and why."""
    all_nics = nics(JUPITER_ADDRS, sysfs(tmp_path, JUPITER))
    got = choose("jpbo-001-01", ["10.128.0.5"], all_nics)
    assert got.host == "10.13.0.5"
    assert got.line == ("rendezvous host 10.13.0.5: jpbo-001-01's InfiniBand interface ib0, "
                        "since its name resolves to 10.128.0.5 on eth0 (set "
                        "site.hostname_suffix to rendezvous by name)")


def test_name_on_the_fast_network_is_kept(tmp_path):
    all_nics = nics(JUPITER_ADDRS, sysfs(tmp_path, JUPITER))
    got = choose("jwb0001i", ["10.14.0.5"], all_nics)
    assert got == ("jwb0001i", "rendezvous host jwb0001i: it resolves to 10.14.0.5 on ib1 "
                               "(InfiniBand, fast)")


def test_cray_nid_on_four_hsn_nics_is_kept_and_nmn_name_is_not(tmp_path):
    all_nics = nics(CRAY_ADDRS, sysfs(tmp_path, CRAY))
    hsn = [f"10.150.0.{7 + 64 * k}" for k in range(4)]
    got = choose("nid000007", hsn, all_nics)
    assert got.host == "nid000007" and "(Slingshot, fast)" in got.line
    assert "10.150.0.71 on hsn1" in got.line
    got = choose("nid000007", ["10.100.0.7"], all_nics)  # a site resolving nid to the nmn
    assert got.host == "10.150.0.7" and "Slingshot interface hsn0" in got.line


def test_no_fast_interface_keeps_the_name(tmp_path):
    tree = sysfs(tmp_path, {"eth0": (1, "up"), "ib0": (32, "down"), "ib1": (32, "up")})
    addrs = {"192.168.1.4": "eth0", "10.1.0.4": "ib0"}  # ib0 down, ib1 without an address
    got = choose("node4", ["192.168.1.4"], nics(addrs, tree))
    assert got == ("node4", "rendezvous host node4: it resolves to 192.168.1.4 on eth0; no "
                            "InfiniBand (IPoIB) or Slingshot (hsn*) interface with an address "
                            "on this node")
    got = choose("node4", [], nics(addrs, tree))  # the name does not resolve: torchrun says so
    assert got.host == "node4" and "it resolves to nothing" in got.line


def test_socket_ifname_names_the_fast_interface(tmp_path):
    """The lab's veth (type 1, not hsn): only site.socket_ifname makes it the fast one; with
    it set, InfiniBand no longer counts unless named."""
    tree = sysfs(tmp_path, {"eth0": (1, "up"), "jwb0001i": (1, "up"), "ib0": (32, "up")})
    addrs = {"10.67.0.1": "eth0", "10.66.0.1": "jwb0001i", "10.13.0.1": "ib0"}
    got = choose("jwb0001", ["10.67.0.1"], nics(addrs, tree), "=jwb0001i")
    assert got.host == "10.66.0.1"
    assert "jwb0001's site.socket_ifname interface jwb0001i" in got.line
    got = choose("jwb0001", ["10.66.0.1"], nics(addrs, tree), "jwb")
    assert got.host == "jwb0001"
    assert choose("jwb0001", ["10.67.0.1"], nics(addrs, tree), "^eth,jwb").host == "10.13.0.1"


def test_ipv4_first_and_an_ipv6_only_one_keeps_the_name(tmp_path):
    """An IPv6 literal would need brackets in --rdzv_endpoint and none in MASTER_ADDR: the
    rule names IPv4 addresses only."""
    tree = sysfs(tmp_path, {"eth0": (1, "up"), "ib0": (32, "up"), "ib1": (32, "up")})
    addrs = {"192.168.1.4": "eth0", "fd00::5": "ib0", "10.9.0.4": "ib1"}
    assert choose("n", ["192.168.1.4"], nics(addrs, tree)).host == "10.9.0.4"
    del addrs["10.9.0.4"]
    assert choose("n", ["192.168.1.4"], nics(addrs, tree)) == (
        "n", "rendezvous host n: it resolves to 192.168.1.4 on eth0; the InfiniBand interface "
             "ib0 has no IPv4 address")


def test_a_failing_rule_keeps_the_name_in_one_line(monkeypatch, capsys):
    def broken():
        raise OSError("getifaddrs\nfailed")
    monkeypatch.setenv("SLURMD_NODENAME", "localhost")
    monkeypatch.setattr(fast, "interface_addresses", broken)
    assert fast.endpoint_main(["localhost"]) == 0
    out, err = capsys.readouterr()
    assert (out, err) == ("localhost\n", "rendezvous host localhost: by name (the fast-network "
                                          "rule failed: getifaddrs failed)\n")


@pytest.mark.parametrize("name, ifname, hit", [
    ("ib0", "ib", True), ("ib01", "=ib0", False), ("ib0", "=ib0", True), ("ib1", "ib0,ib1", True),
    ("eth0", "^eth,lo", False), ("ib0", "^eth,lo", True), ("hsn2", "hsn", True),
])
def test_nccl_style_names(name, ifname, hit):
    assert named_by(name, ifname) is hit


def test_off_the_first_node_the_name_is_kept(monkeypatch, capsys):
    """An salloc shell on a login node: its interfaces say nothing of the node's."""
    monkeypatch.delenv("SLURMD_NODENAME", raising=False)
    assert fast.endpoint_main(["jwb0001"]) == 0
    out, err = capsys.readouterr()
    assert out == "jwb0001\n"
    assert err == "rendezvous host jwb0001: by name, chosen off the node (no SLURMD_NODENAME)\n"


def test_this_machine_with_its_interface_as_ipoib(monkeypatch, capsys, tmp_path):
    """Real getifaddrs and resolver: 'localhost' resolves to loopback only, this machine's
    first non-loopback interface is faked IPoIB: its real address is chosen."""
    real = {a: n for a, n in fast.interface_addresses().items() if n != "lo"}
    if not real:
        pytest.fail("this machine has no non-loopback interface address to test with")
    name = sorted(set(real.values()))[0]
    tree = sysfs(tmp_path, {name: (32, "up")})
    monkeypatch.setenv("SLURMD_NODENAME", "localhost")
    assert fast.endpoint_main(["localhost"], sys_net=tree) == 0
    out, err = capsys.readouterr()
    mine = sorted((a for a, n in real.items() if n == name), key=lambda a: (":" in a, a))
    assert out == mine[0] + "\n", err
    assert err.startswith(f"rendezvous host {mine[0]}: localhost's InfiniBand interface {name}, "
                          "since its name resolves to 127.0.0.1"), err


def test_generic_renders_the_kit_function_and_preview():
    text = render_jobscript(parse(SPEC))
    assert 'jsc_endpoint "$first_node"' in text.splitlines()
    assert "rdzv_host=" not in text  # set by the kit's function
    named = render_jobscript(parse(SPEC.replace("site: generic",
                                                "site: {profile: generic, socket_ifname: =ib0}")))
    assert 'jsc_endpoint "$first_node" =ib0' in named.splitlines()
    preview = render_preview(parse(SPEC), "nid[000001-000002]", job_id=7)
    assert ("# rendezvous endpoint ${rdzv_host}:29400, rdzv_id 7: chosen on the first node "
            "when the job starts (site profile generic):\n#   nid000001:29400 where nid000001 "
            "resolves to an address on its fast interface (InfiniBand (IPoIB) or Slingshot "
            "hsn*) or it has none;\n") in preview
    assert error(SPEC.replace("site: generic", "site: {profile: generic, socket_ifname: "
                              "'ib0;id'}")).startswith("x.yaml: site.socket_ifname: must be ")


def test_the_kit_function_in_bash_on_this_machine():
    """Ring 2: job.sh's jsc_endpoint runs the kit's node code by path for real and sets
    rdzv_host; a node whose name does not resolve keeps its name, and says so."""
    package = kit.installed()
    version = (package / "__init__.py").read_text().split('__version__ = "')[1].split('"')[0]
    me = socket.gethostname()
    script = ('kit="$1"; source "$kit/node/job.sh" "$2" || exit 9; '
              'jsc_endpoint "$3"; printf "%s\\n" "$rdzv_host"')
    for node in (me, "no-such-node.invalid"):
        env = {**os.environ, "SLURMD_NODENAME": node}
        done = subprocess.run(["bash", "-c", script, "x", str(package), version, node],
                              capture_output=True, text=True, env=env, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        assert done.stderr.startswith("rendezvous host "), done.stderr
        host = done.stdout.strip()
        assert host == node or host in fast.interface_addresses(), (host, done.stderr)
    assert host == "no-such-node.invalid" and "resolves to nothing" in done.stderr
