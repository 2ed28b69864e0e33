"""Faults on the local cluster for the doctor's ring 3 tests (and the measurements by hand).

Run under an exclusive allocation of both nodes, so no other job shares a node while a
fault is in place: ``salloc -N2 --exclusive ... python tests/helpers/labfaults.py SCENARIO -- CMD``
applies the scenario's faults, runs CMD (the doctor, or a jobscript without preflight),
restores everything in ``finally`` and prints one line ``labfaults: {json}`` with CMD's exit
status and wall time. Faults that change the nodes' shared state (a node's /etc/hosts, a
packet filter) are logged with start and end to /work/notes/faults.log when it exists.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator, List

STATE = Path("/run/torchrun-jsc-cluster")
FAULTS_LOG = Path("/work/notes/faults.log")
FIRST, SECOND = "jwb0001", "jwb0002"


def node_tmp(node: str) -> Path:
    """The node's own /tmp, seen from the host."""
    return STATE / "node" / node / "tmp"


def _log(text: str) -> None:
    if FAULTS_LOG.parent.is_dir():
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        with FAULTS_LOG.open("a") as f:
            f.write(f"{stamp} doctor (pid {os.getpid()}, job {os.environ.get('SLURM_JOB_ID')}):"
                    f" {text}\n")


@contextlib.contextmanager
def hosts_entry(node: str, name: str, addr: str) -> Iterator[None]:
    """``addr name`` first in the node's private /etc/hosts (edited in place: it is bound
    over /etc/hosts by inode), restored byte for byte afterwards."""
    path = STATE / f"hosts-{node}"
    original = path.read_bytes()
    _log(f"START hosts fault: {node} resolves {name} -> {addr}")
    try:
        with path.open("r+b") as f:
            f.write(f"{addr} {name}\n".encode() + original)
        yield
    finally:
        with path.open("r+b") as f:
            f.write(original)
            f.truncate()
        _log(f"END hosts fault on {node}: restored ({path.read_bytes() == original})")


@contextlib.contextmanager
def drop_between(node: str, peer_addr: str) -> Iterator[None]:
    """Drop every packet between ``node`` and ``peer_addr`` (both directions, in node's
    network namespace)."""
    if shutil.which("iptables") is None:  # Debian's apptainer pulls it in (make setup)
        raise SystemExit("labfaults: iptables not found: apt-get install iptables")
    rules = [["INPUT", "-s", peer_addr, "-j", "DROP"], ["OUTPUT", "-d", peer_addr, "-j", "DROP"]]
    ns = ["nsenter", f"--net=/run/netns/{node}", "--", "iptables", "-w"]
    _log(f"START drop fault: {node} <-> {peer_addr} dropped")
    try:
        for rule in rules:
            subprocess.run([*ns, "-I", *rule], check=True)
        yield
    finally:
        for rule in rules:
            subprocess.run([*ns, "-D", *rule], check=False)
        left = subprocess.run([*ns, "-S"], capture_output=True, text=True).stdout
        _log(f"END drop fault on {node}: rules removed ({peer_addr not in left})")


LISTEN = """import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1]))); s.listen(8); print("ready", flush=True)
while True:
    c, _ = s.accept(); c.sendall(b"not the doctor\\n"); c.close()
"""


@contextlib.contextmanager
def listener(node: str, port: int) -> Iterator[None]:
    """A program of ours listening on ``port`` in the node's network namespace."""
    proc = subprocess.Popen(["nsenter", f"--net=/run/netns/{node}", "--", sys.executable, "-c",
                             LISTEN, str(port)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        yield
    finally:
        proc.kill()
        proc.wait()


@contextlib.contextmanager
def only_on(node: str, rel: str, content: bytes) -> Iterator[str]:
    """A file under /tmp on ``node`` only (each node has its own /tmp); yields its path."""
    path = node_tmp(node) / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    try:
        yield f"/tmp/{rel}"
    finally:
        path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            path.parent.rmdir()


def _image_on_first_only(stack: contextlib.ExitStack, tag: str) -> None:
    """/tmp/TAG-img/image.sif: the real image on the first node, 4 KiB of zeros on the second."""
    good = node_tmp(FIRST) / f"{tag}-img" / "image.sif"
    good.parent.mkdir(parents=True, exist_ok=True)
    good.symlink_to(Path(os.environ["DOCTOR_IMAGE"]).resolve())
    stack.callback(lambda: (good.unlink(), good.parent.rmdir()))
    stack.enter_context(only_on(SECOND, f"{tag}-img/image.sif", b"\0" * 4096))


SCENARIOS = {  # name -> the faults it applies; "mixed": four faults on four checks, one run
    "none": (), "port": ("port",), "bind": ("bind",), "image": ("image",), "hosts": ("hosts",),
    "drop": ("drop",), "mixed": ("port", "bind", "image", "hosts"),
}


def scenario(name: str, port: int, tag: str) -> contextlib.ExitStack:
    """Enter the faults of one scenario; the caller closes the stack."""
    if name not in SCENARIOS:
        raise SystemExit(f"labfaults: unknown scenario {name!r}, expected one of "
                         f"{', '.join(SCENARIOS)}")
    stack = contextlib.ExitStack()
    for fault in SCENARIOS[name]:
        if fault == "port":  # our own program holds the rendezvous port on the first node
            stack.enter_context(listener(FIRST, port))
        elif fault == "bind":  # the bind source exists on the first node only
            stack.enter_context(only_on(FIRST, f"{tag}-bind/data", b"x"))
        elif fault == "image":
            _image_on_first_only(stack, tag)
        elif fault == "hosts":  # the second node resolves the first node's i name to itself
            stack.enter_context(hosts_entry(SECOND, FIRST + "i", "10.66.0.2"))
        elif fault == "drop":
            stack.enter_context(drop_between(FIRST, "10.66.0.2"))
    return stack


def main(argv: List[str]) -> int:
    name, port, tag = argv[0], int(argv[1]), argv[2]
    cmd = argv[argv.index("--") + 1:]
    with scenario(name, port, tag):
        start = time.monotonic()
        done = subprocess.run(cmd, check=False)
        took = time.monotonic() - start
    print("labfaults: " + json.dumps({"rc": done.returncode, "seconds": round(took, 2)}),
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
