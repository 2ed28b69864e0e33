"""Ring 2: the heartbeats' listener (launcher/node/heartbeat.py Listener) on real sockets over
loopback, and a node's heartbeat process (``spares beat``) sending to it: IPv4 and IPv6 senders
both reach the one dual-stack socket, each valid heartbeat is stamped (time.monotonic) on its
own thread as it arrives while the caller is busy elsewhere, and answered; replays, forgeries and
probes by the other network keep no node alive; the receive buffer is what was asked for the
node count, or the kernel's cap is said.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launcher.node import heartbeat
from tests.helpers.sparefakes import wait_for

REPO = Path(__file__).resolve().parents[2]
RUN = [sys.executable, "-I", str(REPO / "launcher/node/run.py")]
KEY = heartbeat.new_key()
HAS_IPV6 = socket.has_ipv6 and os.path.exists("/proc/net/if_inet6") and \
    "00000000000000000000000000000001" in Path("/proc/net/if_inet6").read_text()


@pytest.fixture
def listener():
    heard = heartbeat.Listener(KEY, 4)
    heard.start()
    yield heard
    heard.stop()
    heard.thread.join(5)
    heard.sock.close()


def send(family, host, port, data):
    """One datagram from a socket of ``family``; the answer (or None within 2 s)."""
    with socket.socket(family, socket.SOCK_DGRAM) as sock:
        sock.settimeout(2)
        sock.sendto(data, (host, port))
        try:
            return sock.recv(512)
        except socket.timeout:
            return None


def test_the_listener_is_dual_stack_and_stamps_on_arrival(listener):
    assert listener.family == (socket.AF_INET6 if HAS_IPV6 else socket.AF_INET)
    before = time.monotonic()
    beat = heartbeat.pack(KEY, "beat", "n1", 5)
    answer = send(socket.AF_INET, "127.0.0.1", listener.port, beat)
    assert heartbeat.unpack(KEY, answer) == ("ok", "n1", 5)
    assert before <= listener.last["n1"] <= time.monotonic()
    if HAS_IPV6:
        beat = heartbeat.pack(KEY, "beat", "n2", 6)
        answer = send(socket.AF_INET6, "::1", listener.port, beat)
        assert heartbeat.unpack(KEY, answer) == ("ok", "n2", 6)
        assert "n2" in listener.last


def test_replays_forgeries_and_probes_keep_no_node_alive(listener):
    genuine = heartbeat.pack(KEY, "beat", "n1", 7)
    assert send(socket.AF_INET, "127.0.0.1", listener.port, genuine) is not None
    stamped = listener.last["n1"]
    for data in (genuine,  # a replay
                 heartbeat.pack("f" * 32, "beat", "n1", 8),  # another key
                 b"n1 4242 9"):  # the old unauthenticated form
        assert send(socket.AF_INET, "127.0.0.1", listener.port, data) is None
    # a probe by the batch host's own name: answered, but the fabric's silence stands
    probe = heartbeat.pack(KEY, "probe", "n1", 10)
    answer = send(socket.AF_INET, "127.0.0.1", listener.port, probe)
    assert heartbeat.unpack(KEY, answer) == ("ok", "n1", 10)
    assert listener.last["n1"] == stamped and listener.rejected == 3
    listener.replaced.add("n1")
    late = heartbeat.pack(KEY, "beat", "n1", 11)
    answer = send(socket.AF_INET, "127.0.0.1", listener.port, late)
    assert heartbeat.unpack(KEY, answer) == ("replaced", "n1", 11)


def test_the_receive_buffer_is_sized_for_the_nodes_or_its_cap_said():
    heard = heartbeat.Listener(KEY, 1000)
    try:
        rmem_max = int(Path("/proc/sys/net/core/rmem_max").read_text())
        asked = heartbeat.rcvbuf_for(1000)
        assert heard.rcvbuf_asked == asked
        assert heard.rcvbuf == 2 * min(asked, rmem_max)  # Linux reports twice what it grants
        assert heard.rcvbuf_granted == min(asked, rmem_max)
        assert heard.rcvbuf_capped == (rmem_max < asked)
    finally:
        heard.sock.close()


@pytest.mark.parametrize("where, family", [("[::1]", None), ("localhost", "4"),
                                           ("127.0.0.1", None)])
def test_a_node_heartbeat_reaches_the_listener(listener, tmp_path, where, family):
    """``spares beat`` to the listener by an IPv6 literal, by a name with the IPv4-only hint,
    by an IPv4 literal; the agent (a stand-in) ends once the test has heard its node."""
    if where.startswith("[") and not HAS_IPV6:
        pytest.skip("no IPv6 loopback here")
    env = dict(os.environ, TORCHRUN_JSC_BEAT=f"{where}:{listener.port}",
               TORCHRUN_JSC_BEAT_KEY=KEY, SLURMD_NODENAME="n7")
    if family:
        env["TORCHRUN_JSC_BEAT_FAMILY"] = family
    agent = ("import os, time\nwhile not os.path.exists(%r): time.sleep(0.05)"
             % str(tmp_path / "heard"))
    proc = subprocess.Popen([*RUN, "spares", "beat", "--", sys.executable, "-c", agent],
                            env=env, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: "n7" in listener.last, f"n7's heartbeat by {where}", timeout=30)
    finally:
        (tmp_path / "heard").touch()
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and err == "", err


def test_the_supervisor_says_when_the_kernel_caps_the_buffer(capsys):
    """More nodes than net.core.rmem_max holds heartbeats for: one line in the job's log."""
    from launcher.node import spares

    rmem_max = int(Path("/proc/sys/net/core/rmem_max").read_text())
    nodes = (rmem_max - heartbeat.RCVBUF_BASE) // heartbeat.RCVBUF_PER_NODE + 2
    sup = spares.Supervisor("42", 60, [f"n{i}" for i in range(nodes)], [], ["srun"])
    sup.listen("127.0.0.1")
    try:
        assert capsys.readouterr().out == (
            f"job 42: spares: the heartbeats' receive buffer is {rmem_max} bytes, "
            f"{heartbeat.rcvbuf_for(nodes)} asked for {nodes} nodes (net.core.rmem_max caps "
            "it)\n")
    finally:
        sup.listener.stop()
        sup.marks.close()
