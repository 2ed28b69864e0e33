"""Ring 2: the lab's Enroot/pyxis install from pinned releases (scripts/enroot-pyxis-install.sh,
scripts/fetch-pinned.py) against a loopback HTTP server: verified files are installed into a
temporary root (a tiny .deb built with dpkg-deb, a pyxis-like source tarball built against
stand-in Slurm headers), a checksum mismatch installs nothing, an unreachable or silent server
falls back to the local folder or says in one line what is missing, and the real pins file
is well-formed with no artifact downloaded unchecked.

The server is `python -m http.server` on 127.0.0.1 (port 0), started and stopped here; the
test waits on its port, never on a sleep. Nothing outside the temporary directory is written.
"""

import hashlib
import io
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Dict, Iterator, List, Optional

import pytest

ROOT = Path(__file__).resolve().parents[2]
INSTALL = ROOT / "scripts/enroot-pyxis-install.sh"
FETCH = ROOT / "scripts/fetch-pinned.py"
PINS = ROOT / "scripts/enroot-pyxis.pins"

pytestmark = pytest.mark.skipif(not (shutil.which("dpkg-deb") and shutil.which("make")
                                     and shutil.which("cc")),
                                reason="needs dpkg-deb, make and cc (Debian: make setup)")

MAKEFILE = """\
prefix ?= /usr/local
libdir ?= $(prefix)/lib
datadir ?= $(prefix)/share
CPPFLAGS := -DFROM_MAKEFILE $(CPPFLAGS)
all: spank_pyxis.so
spank_pyxis.so: plugin.c
\t$(CC) $(CPPFLAGS) -shared -fpic -o $@ plugin.c
install: all
\tinstall -D -m 644 spank_pyxis.so $(DESTDIR)$(libdir)/slurm/spank_pyxis.so
\techo 'required $(libdir)/slurm/spank_pyxis.so' | install -D -m 644 /dev/stdin $(DESTDIR)$(datadir)/pyxis/pyxis.conf
"""
# Compiles only with both the Makefile's flags and the stand-in spank.h (SLURM_INCLUDE).
PLUGIN_C = """\
#include <slurm/spank.h>
#if !defined(FAKE_SPANK) || !defined(FROM_MAKEFILE)
#error "built without the Slurm headers or without the Makefile's own CPPFLAGS"
#endif
int fake_plugin = FAKE_SPANK;
"""


def env_without_proxies(**extra: str) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k.lower() not in ("http_proxy", "https_proxy", "all_proxy", "no_proxy")
           and not k.startswith(("ENROOT_PYXIS_", "SLURM_INCLUDE"))}
    env.update(extra)
    return env


def deb_arch() -> str:
    return subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True,
                          check=True).stdout.strip()


def build_deb(out: Path, package: str, files: Dict[str, str]) -> Path:
    pkg = out.parent / f"pkg-{package}"
    (pkg / "DEBIAN").mkdir(parents=True)
    (pkg / "DEBIAN/control").write_text(
        f"Package: {package}\nVersion: 4.1.2-1\nArchitecture: {deb_arch()}\n"
        "Maintainer: test <test@example.invalid>\nDescription: test stand-in\n")
    for rel, text in files.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
        (pkg / rel).chmod(0o755)
    subprocess.run(["dpkg-deb", "--root-owner-group", "-b", str(pkg), str(out)], check=True,
                   capture_output=True)
    return out


def build_source(out: Path, extra: Optional[Dict[str, str]] = None) -> Path:
    files = {"Makefile": MAKEFILE, "plugin.c": PLUGIN_C, **(extra or {})}
    with tarfile.open(out, "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"pyxis-0.24.0/{name}")
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return out


def git_tree_of(files: Dict[str, str], tmp: Path) -> str:
    """The tree id as git itself computes it (an independent check of fetch-pinned.py)."""
    work = tmp / "gitcheck"
    work.mkdir()
    for name, text in files.items():
        (work / name).write_text(text)
    git = ["git", "-c", "core.autocrlf=false", "-C", str(work)]
    subprocess.run(git + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "-f", "."], check=True)
    tree = subprocess.run(git + ["write-tree"], capture_output=True, text=True, check=True)
    shutil.rmtree(work)
    return tree.stdout.strip()


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class Server:
    """python -m http.server on 127.0.0.1, port chosen by the kernel, read from its banner."""

    def __init__(self, directory: Path, log: Path) -> None:
        self.log = log  # one line per request
        with open(log, "w") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-u", "-m", "http.server", "--bind", "127.0.0.1",
                 "--directory", str(directory), "0"],
                stdout=subprocess.PIPE, stderr=err, text=True)
        banner = self.proc.stdout.readline()  # printed once the socket listens
        assert "port" in banner, banner
        self.port = int(banner.split("port ")[1].split()[0])
        with socket.create_connection(("127.0.0.1", self.port), timeout=5):
            pass

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Dict[str, object]]:
    srv = tmp_path / "srv"
    srv.mkdir()
    arch = deb_arch()
    deb = build_deb(srv / f"enroot_4.1.2-1_{arch}.deb", "enroot",
                    {"usr/bin/enroot": "#!/bin/sh\necho 4.1.2\n"})
    caps = build_deb(srv / f"enroot+caps_4.1.2-1_{arch}.deb", "enroot-caps",
                     {"usr/lib/enroot/caps-marker": "caps\n"})
    src = build_source(srv / "v0.24.0.tar.gz")
    tree = git_tree_of({"Makefile": MAKEFILE, "plugin.c": PLUGIN_C}, tmp_path)
    inc = tmp_path / "inc/slurm"
    inc.mkdir(parents=True)
    (inc / "spank.h").write_text("#define FAKE_SPANK 1\n")
    server = Server(srv, tmp_path / "requests.log")
    base = f"http://127.0.0.1:{server.port}"
    hashes = {"enroot": f"sha256:{sha256(deb)}", "enroot+caps": f"sha256:{sha256(caps)}",
              "pyxis": f"git-tree:{tree}"}
    urls = {"enroot": f"{base}/{deb.name}", "enroot+caps": f"{base}/{caps.name}",
            "pyxis": f"{base}/{src.name}"}
    root = tmp_path / "root"
    root.mkdir()
    try:
        yield {"tmp": tmp_path, "arch": arch, "hashes": hashes, "urls": urls, "root": root,
               "inc": tmp_path / "inc", "server": server, "srv": srv}
    finally:
        server.stop()


def write_pins(s: Dict[str, object], **override: str) -> Path:
    hashes = {**s["hashes"], **{k.replace("_", "+"): v for k, v in override.items()}}  # type: ignore[dict-item]
    urls = s["urls"]
    lines = ["# test pins"]
    for name in ("enroot", "enroot+caps"):
        lines.append(f"{name} 4.1.2 {s['arch']} {hashes[name]} {urls[name]}")  # type: ignore[index]
    lines.append(f"pyxis 0.24.0 src {hashes['pyxis']} {urls['pyxis']}")  # type: ignore[index]
    pins = s["tmp"] / "pins"  # type: ignore[operator]
    pins.write_text("\n".join(lines) + "\n")
    return pins


def run_install(pins: Path, root: Path, inc: Optional[Path] = None, local: Optional[Path] = None,
                **env: str) -> subprocess.CompletedProcess:
    extra = {"ENROOT_PYXIS_PINS": str(pins), "ENROOT_PYXIS_TIMEOUT": "5", **env}
    if inc:
        extra["SLURM_INCLUDE"] = str(inc)
    if local:
        extra["ENROOT_PYXIS_LOCAL"] = str(local)
    return subprocess.run(["bash", str(INSTALL), "--root", str(root)], capture_output=True,
                          text=True, timeout=120, env=env_without_proxies(**extra))


def files_under(root: Path) -> List[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_verified_releases_are_installed_into_the_root_and_a_rerun_downloads_nothing(served):
    root = served["root"]
    p = run_install(write_pins(served), root, inc=served["inc"])
    assert p.returncode == 0, p.stdout + p.stderr
    assert "installed from the pinned releases" in p.stdout
    assert files_under(root) == [
        "etc/slurm/plugstack.conf", "etc/slurm/plugstack.conf.d/pyxis.conf",
        "usr/bin/enroot", "usr/lib/enroot/caps-marker", "usr/local/lib/slurm/spank_pyxis.so",
        "usr/local/share/pyxis/pyxis.conf", "var/lib/torchrun-jsc-kit/enroot-pyxis"]
    assert (root / "etc/slurm/plugstack.conf.d/pyxis.conf").read_text() == \
        "required /usr/local/lib/slurm/spank_pyxis.so\n"
    assert (root / "usr/local/lib/slurm/spank_pyxis.so").read_bytes()[:4] == b"\x7fELF"
    served["server"].stop()  # a rerun must not need the network
    assert served["server"].log.read_text().count("GET /") == 3
    again = run_install(write_pins(served), root, inc=served["inc"])
    assert again.returncode == 0 and "already installed" in again.stdout, again.stdout + again.stderr


@pytest.mark.parametrize("which", ["enroot_caps", "pyxis"])
def test_a_checksum_mismatch_installs_nothing(served, which):
    bad = "sha256:" + "0" * 64 if which != "pyxis" else "git-tree:" + "0" * 40
    p = run_install(write_pins(served, **{which: bad}), served["root"], inc=served["inc"])
    assert p.returncode == 1, p.stdout + p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("enroot-pyxis: ") and "mismatch" in lines[0]
    assert "nothing installed" in lines[0], p.stderr
    assert files_under(served["root"]) == []


def test_a_tampered_source_tarball_fails_its_tree_check(served):
    build_source(served["srv"] / "v0.24.0.tar.gz", {"extra.c": "int evil;\n"})
    p = run_install(write_pins(served), served["root"], inc=served["inc"])
    assert p.returncode == 1 and "git-tree mismatch" in p.stderr, p.stderr
    assert files_under(served["root"]) == []


def test_a_failed_pyxis_build_installs_nothing(served, tmp_path):
    no_spank = tmp_path / "inc2/slurm"
    no_spank.mkdir(parents=True)
    (no_spank / "spank.h").write_text("/* no FAKE_SPANK: plugin.c refuses to build */\n")
    p = run_install(write_pins(served), served["root"], inc=no_spank.parent)
    assert p.returncode == 1 and "build against" in p.stderr and "nothing installed" in p.stderr
    assert files_under(served["root"]) == []


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed on return: connecting is refused


def test_offline_falls_back_to_the_local_folder_else_says_what_is_missing(served, tmp_path):
    served["server"].stop()
    base = f"http://127.0.0.1:{closed_port()}"
    served["urls"] = {k: f"{base}/{Path(v).name}" for k, v in served["urls"].items()}
    local = tmp_path / "local"
    local.mkdir()
    (local / "install.sh").write_text("#!/bin/bash\necho ran >\"$0.ran\"\n")
    p = run_install(write_pins(served), served["root"], inc=served["inc"], local=local)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.startswith("enroot-pyxis: enroot 4.1.2") and "unreachable (" in p.stdout
    assert f": using the local folder {local}\n" in p.stdout and p.stderr == ""
    assert files_under(served["root"]) == []
    missing = run_install(write_pins(served), served["root"], inc=served["inc"],
                          local=tmp_path / "absent")
    assert missing.returncode == 3 and len(missing.stderr.strip().splitlines()) == 1
    line = missing.stderr.strip()
    assert "not installed" in line and "unreachable (" in line and "no local folder" in line
    assert "ENROOT_PYXIS_TOOLS=DIR" in line and "github.com/NVIDIA" in line


def test_an_unpinned_artifact_is_never_downloaded(served, tmp_path):
    local = tmp_path / "local"
    local.mkdir()
    (local / "install.sh").write_text("exit 0\n")
    p = run_install(write_pins(served, enroot="none"), served["root"], inc=served["inc"],
                    local=local)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "no verified checksum pinned" in p.stdout and "not downloading it unchecked" in p.stdout
    assert "using the local folder" in p.stdout and p.stderr == ""
    # The server saw no request: the hash check comes before any download.
    served["server"].stop()
    assert "GET" not in served["server"].log.read_text()


def test_told_folder_without_installer_is_one_line(served, tmp_path):
    p = run_install(write_pins(served), served["root"], ENROOT_PYXIS_TOOLS=str(tmp_path / "nope"))
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1
    assert "ENROOT_PYXIS_TOOLS=" in p.stderr and "no install.sh" in p.stderr


def test_a_silent_server_times_out_instead_of_hanging(tmp_path):
    """A peer that accepts the connection and never answers (as behind a firewall that drops
    the replies): the read timeout ends the download with exit 3."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        port = silent.getsockname()[1]
        pins = tmp_path / "pins"
        pins.write_text(f"x 1 src sha256:{'0' * 64} http://127.0.0.1:{port}/x.tar.gz\n")
        start = time.monotonic()
        p = subprocess.run([sys.executable, str(FETCH), "--pins", str(pins), "--timeout", "1",
                            str(tmp_path / "out"), "x:src"], capture_output=True, text=True,
                           timeout=60, env=env_without_proxies())
    assert p.returncode == 3 and "unreachable" in p.stderr, p.stderr
    assert time.monotonic() - start < 30
    assert not list((tmp_path / "out").glob("*"))


def test_the_real_pins_are_well_formed_and_nothing_is_unchecked():
    for item, version in (("enroot:amd64", "4.1.2"), ("enroot+caps:arm64", "4.1.2"),
                          ("pyxis:src", "0.24.0")):
        p = subprocess.run([sys.executable, str(FETCH), "--pins", str(PINS), "--version", item],
                           capture_output=True, text=True, check=True)
        assert p.stdout.strip() == version
    for raw in PINS.read_text().splitlines():
        fields = raw.split("#", 1)[0].split()
        if fields:
            assert fields[3] == "none" or fields[3].startswith(("sha256:", "git-tree:")), raw
            assert fields[4].startswith("https://github.com/NVIDIA/"), raw
    # An artifact pinned `none` is refused before any network access (exit 4).
    p = subprocess.run([sys.executable, str(FETCH), "--pins", str(PINS), "/nonexistent/out",
                        "enroot:amd64"], capture_output=True, text=True)
    assert p.returncode == 4 and "not downloading it unchecked" in p.stderr


def test_bad_pins_and_usage_are_one_line(tmp_path):
    pins = tmp_path / "pins"
    pins.write_text("enroot 4.1.2 amd64 md5:abc https://x/y.deb\n")
    p = subprocess.run([sys.executable, str(FETCH), "--pins", str(pins), str(tmp_path), "enroot:amd64"],
                       capture_output=True, text=True)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and ":1:" in p.stderr
    p = subprocess.run(["bash", str(INSTALL), "--root", "relative"], capture_output=True, text=True)
    assert p.returncode == 2 and "absolute path" in p.stderr
