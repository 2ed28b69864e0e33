#!/usr/bin/env python3
"""Download pinned artifacts and verify them against the hashes in a pins file (stdlib only).

    python3 fetch-pinned.py --pins FILE [--timeout S] OUTDIR NAME:ARCH...
    python3 fetch-pinned.py --pins FILE --version NAME:ARCH

FILE (scripts/enroot-pyxis.pins) has one artifact a line, `NAME VERSION ARCH HASH URL`;
`#` starts a comment. HASH is `sha256:<64 hex>` (the file's bytes), `git-tree:<40 hex>` (a
source tarball whose single top folder holds exactly the tree of that git tree id: what a
release tag's archive holds) or `none` (no checksum could be verified: never downloaded).
A tag with submodules has gitlinks in its tree, which its archive cannot hold (each is an
empty folder there): `git-tree:<40 hex>,PATH=<40 hex commit>,...` names them (what
`git ls-tree TAG PATH` prints), and they take the place of those empty folders when the tree
id is computed, so the check still compares against the tag's own tree id.
Each artifact goes to OUTDIR/<last part of its URL>, written only once verified, and its path
is printed. Every artifact is checked for a hash before any download. --version prints the
pinned version only. Scripts decide by the exit status; a failure is one line on stderr:
  0 all verified   1 download or verification failed (HTTP error, hash mismatch, bad archive)
  2 usage or pins file error   3 unreachable (DNS, refused, timeout)   4 no verifiable hash
--timeout bounds connecting and every read, so a firewall that drops packets ends in exit 3.
Called by scripts/enroot-pyxis-install.sh.
"""

import argparse
import hashlib
import http.client
import os
import re
import socket
import sys
import tarfile
import urllib.error
import urllib.request
from typing import Dict, List, NamedTuple, Optional, Tuple

OK, FAILED, USAGE, UNREACHABLE, UNVERIFIED = 0, 1, 2, 3, 4
HASH = re.compile(r"^(?:sha256:[0-9a-f]{64}|git-tree:[0-9a-f]{40}(?:,[^\s,=]+=[0-9a-f]{40})*|none)$")


class Pin(NamedTuple):
    name: str
    version: str
    arch: str
    hash: str
    url: str


class Failure(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def read_pins(path: str) -> Dict[Tuple[str, str], Pin]:
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise Failure(USAGE, f"cannot read pins file {path!r}: {e.strerror}") from None
    pins = {}
    for number, raw in enumerate(lines, 1):
        fields = raw.split("#", 1)[0].split()
        if not fields:
            continue
        if len(fields) != 5 or not HASH.match(fields[3]) or "://" not in fields[4]:
            raise Failure(USAGE, f"{path}:{number}: expected 'NAME VERSION ARCH HASH URL' with HASH "
                                 f"sha256:<64 hex>, git-tree:<40 hex>[,PATH=<40 hex>...] or none, got {raw.strip()!r}")
        pin = Pin(*fields)
        pins[(pin.name, pin.arch)] = pin
    return pins


def select(pins: Dict[Tuple[str, str], Pin], wanted: List[str], path: str) -> List[Pin]:
    chosen = []
    for item in wanted:
        name, sep, arch = item.partition(":")
        if not sep or (name, arch) not in pins:
            have = " ".join(f"{n}:{a}" for n, a in sorted(pins))
            raise Failure(USAGE, f"{path}: no pin for {item!r} (NAME:ARCH; pinned: {have})")
        chosen.append(pins[(name, arch)])
    return chosen


def git_tree_id(archive: str, gitlinks: Optional[Dict[str, str]] = None) -> str:
    """The git tree id of the tarball's single top folder, computed from the members alone
    (nothing is unpacked). Links, devices and paths leaving the folder are refused. gitlinks
    (PATH -> commit id, submodules) are entered where the tarball has at most an empty folder."""
    tree: Dict[str, object] = {}
    top = None
    try:
        with tarfile.open(archive, "r:*") as tar:
            for member in tar:
                parts = [p for p in member.name.split("/") if p not in ("", ".")]
                if member.name.startswith("/") or ".." in parts or not parts:
                    raise Failure(FAILED, f"{archive}: unsafe member path {member.name!r}")
                if top is None:
                    top = parts[0]
                if parts[0] != top:
                    raise Failure(FAILED, f"{archive}: more than one top folder ({top!r}, {parts[0]!r})")
                if member.isdir():
                    continue
                if not (member.isfile() or member.issym()):
                    raise Failure(FAILED, f"{archive}: {member.name!r} is neither file nor symlink")
                if member.issym():
                    mode, data = "120000", member.linkname.encode()
                else:
                    mode = "100755" if member.mode & 0o100 else "100644"
                    data = tar.extractfile(member).read()  # type: ignore[union-attr]
                node = tree
                for part in parts[1:-1]:
                    node = node.setdefault(part, {})  # type: ignore[assignment]
                    if not isinstance(node, dict):
                        raise Failure(FAILED, f"{archive}: {member.name!r} under a file")
                node[parts[-1]] = (mode, git_object("blob", data))
    except (tarfile.TarError, OSError, EOFError) as e:
        raise Failure(FAILED, f"{archive}: not a readable tarball ({e})") from None
    for path, commit in (gitlinks or {}).items():
        *folders, last = path.strip("/").split("/")
        node = tree
        for part in folders:
            node = node.setdefault(part, {})  # type: ignore[assignment]
            if not isinstance(node, dict):
                raise Failure(FAILED, f"{archive}: submodule {path!r} under a file")
        if last in node:  # a folder with files (folders without are not entered) or a file
            raise Failure(FAILED, f"{archive}: submodule path {path!r} holds content in the tarball")
        node[last] = ("160000", bytes.fromhex(commit))
    return git_tree(tree).hex()


def git_object(kind: str, data: bytes) -> bytes:
    return hashlib.sha1(b"%s %d\0" % (kind.encode(), len(data)) + data).digest()


def git_tree(tree: Dict[str, object]) -> bytes:
    entries = []
    for name, value in tree.items():
        if isinstance(value, dict):
            if value:  # git keeps no empty folders
                entries.append((name + "/", b"40000 " + name.encode() + b"\0" + git_tree(value)))
        else:
            mode, digest = value  # type: ignore[misc]
            entries.append((name, mode.encode() + b" " + name.encode() + b"\0" + digest))
    return git_object("tree", b"".join(e for _, e in sorted(entries)))


def download(pin: Pin, outdir: str, timeout: float) -> str:
    target = os.path.join(outdir, pin.url.rstrip("/").rsplit("/", 1)[-1])
    part = target + ".part"
    sha = hashlib.sha256()
    try:
        with urllib.request.urlopen(pin.url, timeout=timeout) as response, open(part, "wb") as out:
            for chunk in iter(lambda: response.read(1 << 16), b""):
                sha.update(chunk)
                out.write(chunk)
    except urllib.error.HTTPError as e:
        _remove(part)
        raise Failure(FAILED, f"{pin.name} {pin.version}: {pin.url}: HTTP {e.code} {e.reason}") from None
    except http.client.HTTPException as e:
        _remove(part)
        raise Failure(FAILED, f"{pin.name} {pin.version}: {pin.url}: broken transfer ({e!r})") from None
    except (urllib.error.URLError, socket.timeout, ConnectionError) as e:
        _remove(part)
        reason = getattr(e, "reason", e)
        raise Failure(UNREACHABLE, f"{pin.name} {pin.version}: {pin.url} unreachable ({reason})") from None
    kind, _, want = pin.hash.partition(":")
    want, *links = want.split(",")
    got = sha.hexdigest() if kind == "sha256" else _tree_or_remove(part, dict(l.split("=") for l in links))
    if got != want:
        _remove(part)
        raise Failure(FAILED, f"{pin.name} {pin.version} ({pin.arch}): {kind} mismatch for {pin.url}: "
                              f"pinned {want}, downloaded {got}; nothing installed")
    os.replace(part, target)
    return target


def _tree_or_remove(part: str, gitlinks: Dict[str, str]) -> str:
    try:
        return git_tree_id(part, gitlinks)
    except Failure:
        _remove(part)
        raise


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(prog="fetch-pinned.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--pins", required=True)
    parser.add_argument("--timeout", type=float, default=20.0)
    parser.add_argument("--version", metavar="NAME:ARCH")
    parser.add_argument("outdir", nargs="?")
    parser.add_argument("artifacts", nargs="*", metavar="NAME:ARCH")
    args = parser.parse_args(argv)
    try:
        pins = read_pins(args.pins)
        if args.version:
            print(select(pins, [args.version], args.pins)[0].version)
            return OK
        if not args.outdir or not args.artifacts or args.timeout <= 0:
            raise Failure(USAGE, "usage: fetch-pinned.py --pins FILE [--timeout S>0] OUTDIR NAME:ARCH...")
        chosen = select(pins, args.artifacts, args.pins)
        unverified = [f"{p.name} {p.version} ({p.arch})" for p in chosen if p.hash == "none"]
        if unverified:
            raise Failure(UNVERIFIED, f"no verified checksum pinned in {args.pins} for "
                                      f"{', '.join(unverified)}: not downloading it unchecked")
        os.makedirs(args.outdir, exist_ok=True)
        for pin in chosen:
            print(download(pin, args.outdir, args.timeout))
    except Failure as e:
        print(f"fetch-pinned: {e}", file=sys.stderr)
        return e.code
    return OK


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
