"""Ring 2 helpers for the spare-node supervisor (launcher/node/spares.py): stand-ins for srun,
squeue, scancel, scontrol and sinfo with a registry of steps, and a UDP relay that plays the
fabric between the nodes' heartbeats and the batch host (a nemesis that cuts and restores a
node's fabric while its step and its management side, Slurm, go on).

- srun ``--nodelist=NODE ARGV...`` runs the step here with SLURMD_NODENAME=NODE in a process
  group of its own and registers it as step ``42.<its pid>`` in FAKE_DIR/steps (removed when it
  ends); SIGTERM ends the group (the real srun passes it to the tasks). On a node in $DEAD no
  step starts (srun: error: Node failure) and srun ends with 0, as Slurm 24.11's did. With
  $RELAY set, the step's heartbeats go to the relay, which forwards them to the supervisor;
  their probes by the batch host's own name go straight to it, unless $NO_VIA is set (a
  management network that does not reach it, as in today's lab).
- squeue ``-s`` lists the registered steps as ``ID NODE``; scancel ``--signal=KILL ID`` kills
  that step's process group; sinfo ``-n NODES`` says ``NODE STATE`` (FAKE_DIR/state.NODE, else
  ``allocated``); scontrol does nothing. Every call is recorded in FAKE_DIR/called first, and
  so is an srun without ``--nodelist=`` first (the batch script's steps over the allocation:
  unstaging, the stacks collector), which does nothing else.
  A file FAKE_DIR/stall makes squeue, scancel and sinfo hang until FAKE_DIR/release exists (a
  stalled controller), in a process of their own session holding their output open (as a
  command stuck on a filesystem: killing the command's group does not end it).
"""

from __future__ import annotations

import os
import select
import socket
import threading
from pathlib import Path
from typing import Dict, Iterable, List, Set, Tuple

SRUN = """#!/bin/bash
case "$1" in
    --nodelist=*) ;;
    *) echo "srun $*" >>"$FAKE_DIR/called"; exit 0 ;;  # a step over the allocation: recorded
esac
node=${1#--nodelist=}; shift
if [[ " ${DEAD:-} " == *" $node "* ]]; then
    echo "srun: error: Node failure on $node" >&2
    exit 0
fi
if [ -n "${RELAY:-}" ]; then
    echo "$TORCHRUN_JSC_BEAT" >"$FAKE_DIR/beat-addr"
    export TORCHRUN_JSC_BEAT=$RELAY
fi
if [ -n "${NO_VIA:-}" ]; then unset TORCHRUN_JSC_BEAT_VIA; fi
SLURMD_NODENAME="$node" setsid "$@" &
step=$!
echo "$node $step" >"$FAKE_DIR/steps/42.$$"
trap 'kill -KILL -- "-$step"' TERM
wait "$step"
rc=$?
wait "$step" 2>/dev/null
rm -f "$FAKE_DIR/steps/42.$$"
exit $rc
"""

STALL = """
if [ -e "$FAKE_DIR/stall" ]; then
    setsid sh -c 'while [ ! -e "$FAKE_DIR/release" ]; do sleep 0.05; done' &
    wait
fi
"""

TOOLS = {
    "squeue": """
for f in "$FAKE_DIR"/steps/*; do
    [ -e "$f" ] || continue
    read -r node pgid <"$f"
    echo "${f##*/} $node"
done
""",
    "scancel": """
if [ "$1" = --signal=KILL ]; then
    shift
    for id in "$@"; do
        read -r node pgid <"$FAKE_DIR/steps/$id" && kill -KILL -- "-$pgid"
    done
fi
""",
    "sinfo": """
while [ $# -gt 0 ]; do
    case "$1" in -n) nodes=$2; shift ;; esac
    shift
done
for node in ${nodes//,/ }; do
    state=allocated
    [ -e "$FAKE_DIR/state.$node" ] && state=$(cat "$FAKE_DIR/state.$node")
    echo "$node $state"
done
""",
    "scontrol": "",
}


def install(fake_dir: Path) -> Dict[str, str]:
    """The stand-ins in fake_dir/bin; the environment that puts them first on PATH."""
    (fake_dir / "bin").mkdir(parents=True)
    (fake_dir / "steps").mkdir()
    (fake_dir / "bin" / "srun").write_text(SRUN)
    for name, body in TOOLS.items():
        stall = STALL if name != "scontrol" else ""
        (fake_dir / "bin" / name).write_text(
            f'#!/bin/bash\necho "{name} $*" >>"$FAKE_DIR/called"\n{stall}{body}')
    for path in (fake_dir / "bin").iterdir():
        path.chmod(0o755)
    return {"FAKE_DIR": str(fake_dir),
            "PATH": f"{fake_dir / 'bin'}:{os.environ['PATH']}"}


def called(fake_dir: Path) -> str:
    path = fake_dir / "called"
    return path.read_text() if path.exists() else ""


class Relay:
    """The fabric: forwards each node's heartbeats to the supervisor and its answers back,
    except for the nodes cut. ``cut_after_answer``: nodes cut, all at once, as soon as every
    one of them has had an answer through here (its heartbeat then knows its batch host)."""

    def __init__(self, fake_dir: Path, cut_after_answer: Iterable[str] = ()) -> None:
        self.fake_dir = fake_dir
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.addr = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.pending: Set[str] = set(cut_after_answer)
        self.armed = set(self.pending)
        self.cut: Set[str] = set()
        self.cut_done = threading.Event()
        self.answered: Dict[str, int] = {}  # node -> answers passed on since the last restore
        # node -> its last heartbeats passed on (a forger on the fabric could have seen them)
        self.captured: Dict[str, List[bytes]] = {}
        self.lock = threading.Lock()
        self.upstream: Dict[Tuple[str, int], socket.socket] = {}  # node's address -> socket
        self.node_of: Dict[socket.socket, Tuple[str, Tuple[str, int]]] = {}
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def supervisor(self) -> Tuple[str, int]:
        host, _, port = (self.fake_dir / "beat-addr").read_text().strip().rpartition(":")
        return host.strip("[]"), int(port)

    def restore(self) -> None:
        with self.lock:
            self.cut.clear()
            self.answered.clear()

    def serve(self) -> None:
        while not self.stopped.is_set():
            ready = select.select([self.sock, *self.node_of], [], [], 0.2)[0]
            for sock in ready:
                data, addr = sock.recvfrom(512)
                words = data.decode("ascii", "replace").split(" ")
                node = words[1] if len(words) > 1 else "?"
                with self.lock:
                    if node in self.cut:
                        continue
                if sock is self.sock:
                    self.captured[node] = (self.captured.get(node, []) + [data])[-3:]
                    up = self.upstream.get(addr)
                    if up is None:
                        up = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                        self.upstream[addr] = up
                        self.node_of[up] = (node, addr)
                    up.sendto(data, self.supervisor())
                    continue
                self.sock.sendto(data, self.node_of[sock][1])
                with self.lock:
                    self.answered[node] = self.answered.get(node, 0) + 1
                    self.armed.discard(node)
                    if self.pending and not self.armed:
                        self.cut |= self.pending
                        self.pending = set()
                        self.cut_done.set()

    def close(self) -> None:
        self.stopped.set()
        self.thread.join(5)
        for sock in [self.sock, *self.node_of]:
            sock.close()


def wait_for(check, what: str, timeout: float = 60.0) -> None:
    """Until ``check()`` is true (an event the test waits for, polled), else fail naming it."""
    import time

    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"waited {timeout:.0f} s for {what}"
        time.sleep(0.05)
