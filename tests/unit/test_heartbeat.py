"""Ring 1: the spare nodes' heartbeat and what the supervisor makes of Slurm's answers, pure:
the authenticated datagrams (launcher/node/heartbeat.py pack/unpack), the destination a node
resolves (AAAA first, or IPv4 only where the listener is), the limits the heartbeat timeout
implies (spares.limits), and the triage of silent nodes against Slurm's node states
(launcher/node/slurmstate.py). The listener on real sockets: tests/fakes/test_heartbeat_net.py;
the supervisor under faults: tests/fakes/test_spare_faults.py.
"""

from __future__ import annotations

import socket

import pytest

from launcher.node import heartbeat, slurmstate, spares

KEY = "00112233445566778899aabbccddeeff"


def test_a_datagram_carries_its_mac_and_nothing_else_passes():
    data = heartbeat.pack(KEY, "beat", "jwb0002", 1764000000123)
    assert data.startswith(b"beat jwb0002 1764000000123 ") and len(data.split()) == 4
    assert heartbeat.unpack(KEY, data) == ("beat", "jwb0002", 1764000000123)
    assert heartbeat.unpack("f" * 32, data) is None  # another job's secret
    words = data.split(b" ")
    for forged in (b" ".join([words[0], b"jwb0003", *words[2:]]),  # another node's name
                   b" ".join([*words[:2], b"1764000000124", words[3]]),  # a newer sequence
                   b"jwb0002 4242 7",  # the old unauthenticated form
                   data + b" x", b"\xff\xfe", b""):
        assert heartbeat.unpack(KEY, forged) is None, forged


def test_a_node_resolves_aaaa_first_or_ipv4_where_the_listener_is(monkeypatch):
    """A dual-stack name: the node takes getaddrinfo's first answer (IPv6 here), which the
    listener's dual-stack socket takes too; with $TORCHRUN_JSC_BEAT_FAMILY=4 (a listener
    without IPv6) it asks for IPv4 only."""
    asked = []

    def getaddrinfo(host, port, family, kind):
        asked.append(family)
        v6 = (socket.AF_INET6, kind, 17, "", ("fd00::2", port, 0, 0))
        v4 = (socket.AF_INET, kind, 17, "", ("10.66.0.2", port))
        return [v4] if family == socket.AF_INET else [v6, v4]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    assert heartbeat.resolve("jwb0001i", "4711", None)[4] == ("fd00::2", 4711, 0, 0)
    assert heartbeat.resolve("jwb0001i", "4711", "4")[4] == ("10.66.0.2", 4711)
    assert heartbeat.resolve("[fd00::1]", "4711", None)[0] == socket.AF_INET6
    assert asked == [socket.AF_UNSPEC, socket.AF_INET, socket.AF_UNSPEC]


def test_a_name_that_does_not_resolve_is_one_line(monkeypatch, capsys):
    def getaddrinfo(*args):
        raise socket.gaierror(-2, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    assert heartbeat.resolve("nowhere", "1", None) is None
    assert capsys.readouterr().err == ("spares beat: cannot resolve nowhere ([Errno -2] Name or "
                                       "service not known): no heartbeat\n")


@pytest.mark.parametrize("timeout, ntrain, want", [
    (10, 2, (10.0, 50.0, 60.5)),      # the lab's: the nodes wait 50 s for their batch host
    (60, 1000, (30.0, 240.0, 310.0)),  # the default at 1,000 nodes: a Slurm call 30 s at most
    (5, 4, (5.0, 25.0, 61.0)),
    (3, 4, (3.0, 15.0, 61.0)),        # tests/fakes/test_spare_faults.py
])
def test_the_heartbeat_timeout_sets_the_others(timeout, ntrain, want):
    """(a Slurm command's timeout, the nodes' batch host timeout, the first beat's grace): the
    host timeout outlasts detection plus three Slurm calls, the grace grows with the nodes."""
    call, host, grace = spares.limits(timeout, ntrain)
    assert (call, host, grace) == want
    assert host > timeout + 3 * call


def test_the_receive_buffer_grows_with_the_nodes():
    assert heartbeat.rcvbuf_for(0) == 65536
    assert heartbeat.rcvbuf_for(1000) == 65536 + 2048 * 1000


@pytest.mark.parametrize("state, dead", [
    ("allocated", False), ("mixed", False), ("drained", False), ("allocated+drain", False),
    ("completing", False), ("down", True), ("down*", True), ("allocated*", True),
    ("idle*", True), ("fail", True), ("powered_down", True), ("future", True), (None, False),
    ("", False),
])
def test_what_slurm_says_is_gone(state, dead):
    assert slurmstate.is_dead(state) is dead


def test_sinfo_lines_by_node():
    assert slurmstate.node_states(["jwb0002 allocated", "jwb0003 DOWN*", "junk", ""]) == \
        {"jwb0002": "allocated", "jwb0003": "down*"}


TRAIN = ["n1", "n2", "n3", "n4", "n5", "n6"]
ALIVE = {n: "allocated" for n in TRAIN}
GONE = "Slurm says they respond"


@pytest.mark.parametrize("silent, states, spares_left, quiet, replace, why", [
    # one node silent: replaced (with no spare left the supervisor requeues, as ever)
    (["n2"], ALIVE, 1, [], ["n2"], None),
    (["n2"], ALIVE, 0, [], ["n2"], None),
    (["n2"], {}, 1, [], ["n2"], None),  # Slurm did not answer: the silence alone
    # most training nodes at once: a blip, nothing replaced; a node Slurm calls gone is
    (["n2", "n3", "n4", "n5"], ALIVE, 2, [], [],
     "4 of 6 training nodes silent at once (n2, n3, n4, n5; " + GONE + "): a fabric blip or "
     "the batch host's network, not the nodes: n2, n3, n4, n5 not replaced, waiting"),
    (["n2", "n3"], dict(ALIVE, n3="down*"), 2, ["n4", "n5"], ["n3"],
     "4 of 6 training nodes silent at once (n2, n3, n4, n5; " + GONE + "): a fabric blip or "
     "the batch host's network, not the nodes: n2 not replaced, waiting"),
    # the batch host's own heartbeat silent too: suspect it, not the nodes
    (["n1", "n2"], ALIVE, 2, [], [],
     "the batch host's own heartbeat (n1) is silent too: its network, not the nodes': n1, n2 "
     "not replaced, waiting"),
    # several at once, more than the spares (a leaf switch): wait, unless Slurm says gone
    (["n2", "n3"], ALIVE, 1, [], [],
     "2 nodes silent at once (n2, n3; " + GONE + "), 1 spare left: n2, n3 not replaced, "
     "waiting"),
    (["n2", "n3"], {}, 1, [], [],
     "2 nodes silent at once (n2, n3; Slurm did not answer), 1 spare left: n2, n3 not "
     "replaced, waiting"),
    (["n2", "n3"], dict(ALIVE, n2="down", n3="idle*"), 1, [], ["n2", "n3"], None),
    (["n2", "n3"], ALIVE, 2, [], ["n2", "n3"], None),
])
def test_triage_of_silent_nodes(silent, states, spares_left, quiet, replace, why):
    assert slurmstate.triage(silent, states, TRAIN, spares_left, quiet) == (replace, why)

