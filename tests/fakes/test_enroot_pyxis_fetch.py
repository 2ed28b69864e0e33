"""Ring 2: the lab's Enroot/pyxis install from pinned releases (scripts/enroot-pyxis-install.sh,
scripts/fetch-pinned.py) against a loopback HTTP server: verified source tarballs are built and
installed into a temporary root (an Enroot-like source with a submodule gitlink, built with
FORCE_GLIBC and the makeself tarball unpacked into it, checked by its `enroot version`; a
pyxis-like source built against stand-in Slurm headers), a checksum mismatch, content where a
submodule belongs, a failed build or a wrong built version installs nothing, an unreachable or
silent server falls back to the local folder or says in one line what is missing, a `git
archive` of a repository with a submodule and a symlink passes its tree id, and the real pins
file is well-formed with every artifact verifiable.

The real sources were built the same way (issue 28): GitHub-style archives of the tags, made
with `git archive --prefix=...` from clones of NVIDIA/enroot (v4.1.2), megastep/makeself
(release-2.4.5) and NVIDIA/pyxis (v0.24.0), served on loopback with the real pins: the tree
ids matched, and the installed Enroot tree was byte for byte the lab's local build.

The server is `python -m http.server` on 127.0.0.1 (port 0), started and stopped here; the
test waits on its port, never on a sleep. Nothing outside the temporary directory is written.
"""

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

pytestmark = pytest.mark.skipif(not (shutil.which("dpkg") and shutil.which("make")
                                     and shutil.which("cc") and shutil.which("git")),
                                reason="needs dpkg, make, cc and git (Debian: make setup)")

PYXIS_MAKEFILE = """\
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
PYXIS = {"Makefile": PYXIS_MAKEFILE, "plugin.c": PLUGIN_C}

# Enroot's Makefile in small: without FORCE_GLIBC it wants musl (an empty submodule here);
# `all` (no DESTDIR) writes sysconfdir into the enroot script; makeself.sh comes from the
# deps/makeself submodule, which the installer fills from the makeself tarball.
ENROOT_MAKEFILE = """\
prefix ?= /usr/local
sysconfdir ?= $(prefix)/etc
ifndef FORCE_GLIBC
$(error no FORCE_GLIBC: the utils want musl, and deps/musl is empty)
endif
all: enroot bin/enroot-nsenter deps/dist/makeself/bin/enroot-makeself
enroot: enroot.in
\tsed 's;@sysconfdir@;$(DESTDIR)$(sysconfdir)/enroot;' enroot.in > $@
bin/enroot-nsenter: bin/enroot-nsenter.c
\t$(CC) -o $@ bin/enroot-nsenter.c
deps/dist/makeself/bin/enroot-makeself: deps/linux-headers/.stamp
\tinstall -D -m 755 deps/makeself/makeself.sh $@
install: all
\tinstall -D -m 755 enroot $(DESTDIR)$(prefix)/bin/enroot
\tinstall -D -m 755 bin/enroot-nsenter $(DESTDIR)$(prefix)/bin/enroot-nsenter
\tinstall -D -m 755 deps/dist/makeself/bin/enroot-makeself $(DESTDIR)$(prefix)/bin/enroot-makeself
\tinstall -D -m 644 common.sh $(DESTDIR)$(prefix)/lib/enroot/common.sh
\tinstall -D -m 644 enroot.conf $(DESTDIR)$(sysconfdir)/enroot/enroot.conf
"""
ENROOT_IN = """\
#!/bin/bash
# sysconfdir: @sysconfdir@
. "${ENROOT_LIBRARY_PATH:-/usr/lib/enroot}/common.sh"
[ "$1" = version ] && echo "$ENROOT_VERSION"
"""
MAKESELF_COMMIT = "5742be6410bfad2c619fb1e98bf795e8fa0913c7"  # a gitlink needs only an id
MAKESELF = {"makeself.sh": "#!/bin/sh\necho makeself stand-in\n"}


def enroot_files(version: str = "4.1.2") -> Dict[str, str]:
    return {"Makefile": ENROOT_MAKEFILE, "enroot.in": ENROOT_IN, "enroot.conf": "# conf\n",
            "common.sh": f"ENROOT_VERSION={version}\n",
            "bin/enroot-nsenter.c": "int main(void) { return 0; }\n"}


def env_without_proxies(**extra: str) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k.lower() not in ("http_proxy", "https_proxy", "all_proxy", "no_proxy")
           and not k.startswith(("ENROOT_PYXIS_", "SLURM_INCLUDE"))}
    env.update(extra)
    return env


def build_source(out: Path, top: str, files: Dict[str, str], folders: List[str] = ()) -> Path:
    """A tag archive as GitHub serves it: one top folder; a submodule is an empty folder."""
    with tarfile.open(out, "w:gz") as tar:
        for name in folders:
            info = tarfile.TarInfo(f"{top}/{name}")
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size, info.mode = len(data), 0o755 if name.endswith(".sh") else 0o644
            tar.addfile(info, io.BytesIO(data))
    return out


def git(*args: str) -> str:
    return subprocess.run(["git", "-c", "core.autocrlf=false", *args], capture_output=True,
                          text=True, check=True).stdout.strip()


def git_tree_of(files: Dict[str, str], tmp: Path, gitlinks: Optional[Dict[str, str]] = None) -> str:
    """The tree id as git itself computes it (an independent check of fetch-pinned.py)."""
    work = tmp / "gitcheck"
    work.mkdir()
    for name, text in files.items():
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_text(text)
        (work / name).chmod(0o755 if name.endswith(".sh") else 0o644)
    git("-C", str(work), "init", "-q")
    git("-C", str(work), "add", "-f", ".")
    for path, commit in (gitlinks or {}).items():
        git("-C", str(work), "update-index", "--add", "--cacheinfo", f"160000,{commit},{path}")
    tree = git("-C", str(work), "write-tree")
    shutil.rmtree(work)
    return tree


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


def make_enroot(srv: Path, tmp: Path, version: str = "4.1.2", extra: Optional[Dict[str, str]] = None) -> str:
    """Serves an Enroot-like tag archive as srv/v4.1.2.tar.gz; returns its pin (git tree id and
    the deps/makeself gitlink), computed by git from the files alone (without `extra`)."""
    files = enroot_files(version)
    build_source(srv / "v4.1.2.tar.gz", "enroot-4.1.2", {**files, **(extra or {})},
                 ["deps/", "deps/makeself/", "deps/linux-headers/"])
    tree = git_tree_of(files, tmp, {"deps/makeself": MAKESELF_COMMIT})
    return f"git-tree:{tree},deps/makeself={MAKESELF_COMMIT}"


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Dict[str, object]]:
    srv = tmp_path / "srv"
    srv.mkdir()
    enroot = make_enroot(srv, tmp_path)
    makeself = build_source(srv / "release-2.4.5.tar.gz", "makeself-release-2.4.5", MAKESELF)
    pyxis = build_source(srv / "v0.24.0.tar.gz", "pyxis-0.24.0", PYXIS)
    inc = tmp_path / "inc/slurm"
    inc.mkdir(parents=True)
    (inc / "spank.h").write_text("#define FAKE_SPANK 1\n")
    server = Server(srv, tmp_path / "requests.log")
    base = f"http://127.0.0.1:{server.port}"
    hashes = {"enroot": enroot, "makeself": f"git-tree:{git_tree_of(MAKESELF, tmp_path)}",
              "pyxis": f"git-tree:{git_tree_of(PYXIS, tmp_path)}"}
    urls = {"enroot": f"{base}/v4.1.2.tar.gz", "makeself": f"{base}/{makeself.name}",
            "pyxis": f"{base}/{pyxis.name}"}
    root = tmp_path / "root"
    root.mkdir()
    try:
        yield {"tmp": tmp_path, "hashes": hashes, "urls": urls, "root": root,
               "inc": tmp_path / "inc", "server": server, "srv": srv}
    finally:
        server.stop()


def write_pins(s: Dict[str, object], **override: str) -> Path:
    hashes = {**s["hashes"], **override}  # type: ignore[dict-item]
    urls = s["urls"]
    versions = {"enroot": "4.1.2", "makeself": "2.4.5", "pyxis": "0.24.0"}
    lines = ["# test pins"] + [f"{name} {versions[name]} src {hashes[name]} {urls[name]}"  # type: ignore[index]
                               for name in versions]
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
        "etc/enroot/enroot.conf", "etc/slurm/plugstack.conf", "etc/slurm/plugstack.conf.d/pyxis.conf",
        "usr/bin/enroot", "usr/bin/enroot-makeself", "usr/bin/enroot-nsenter",
        "usr/lib/enroot/common.sh", "usr/local/lib/slurm/spank_pyxis.so",
        "usr/local/share/pyxis/pyxis.conf", "var/lib/torchrun-jsc-kit/enroot-pyxis"]
    # Built without DESTDIR, installed with it: the script names the real sysconfdir.
    assert "# sysconfdir: /etc/enroot\n" in (root / "usr/bin/enroot").read_text()
    assert (root / "usr/bin/enroot-makeself").read_text() == MAKESELF["makeself.sh"]
    assert (root / "usr/bin/enroot-nsenter").read_bytes()[:4] == b"\x7fELF"
    assert (root / "etc/slurm/plugstack.conf.d/pyxis.conf").read_text() == \
        "required /usr/local/lib/slurm/spank_pyxis.so\n"
    assert (root / "usr/local/lib/slurm/spank_pyxis.so").read_bytes()[:4] == b"\x7fELF"
    served["server"].stop()  # a rerun must not need the network
    assert served["server"].log.read_text().count("GET /") == 3
    again = run_install(write_pins(served), root, inc=served["inc"])
    assert again.returncode == 0 and "already installed" in again.stdout, again.stdout + again.stderr


@pytest.mark.parametrize("which", ["enroot", "makeself", "pyxis"])
def test_a_checksum_mismatch_installs_nothing(served, which):
    p = run_install(write_pins(served, **{which: "git-tree:" + "0" * 40}), served["root"],
                    inc=served["inc"])
    assert p.returncode == 1, p.stdout + p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("enroot-pyxis: ") and "mismatch" in lines[0]
    assert "nothing installed" in lines[0], p.stderr
    assert files_under(served["root"]) == []


def test_a_tampered_source_tarball_fails_its_tree_check(served):
    build_source(served["srv"] / "v0.24.0.tar.gz", "pyxis-0.24.0", {**PYXIS, "extra.c": "int evil;\n"})
    p = run_install(write_pins(served), served["root"], inc=served["inc"])
    assert p.returncode == 1 and "git-tree mismatch" in p.stderr, p.stderr
    assert files_under(served["root"]) == []


def test_content_where_a_submodule_belongs_is_refused(served, tmp_path):
    """The pin names deps/makeself as a gitlink: files there would be built unchecked."""
    make_enroot(served["srv"], tmp_path, extra={"deps/makeself/makeself.sh": "#!/bin/sh\nevil\n"})
    p = run_install(write_pins(served), served["root"], inc=served["inc"])
    assert p.returncode == 1 and "submodule path 'deps/makeself' holds content" in p.stderr, p.stderr
    assert files_under(served["root"]) == []


def test_a_failed_pyxis_build_installs_nothing(served, tmp_path):
    no_spank = tmp_path / "inc2/slurm"
    no_spank.mkdir(parents=True)
    (no_spank / "spank.h").write_text("/* no FAKE_SPANK: plugin.c refuses to build */\n")
    p = run_install(write_pins(served), served["root"], inc=no_spank.parent)
    assert p.returncode == 1 and "build against" in p.stderr and "nothing installed" in p.stderr
    assert files_under(served["root"]) == []


def test_an_enroot_that_builds_another_version_installs_nothing(served, tmp_path):
    pin = make_enroot(served["srv"], tmp_path, version="4.1.1")
    p = run_install(write_pins(served, enroot=pin), served["root"], inc=served["inc"])
    assert p.returncode == 1, p.stdout + p.stderr
    assert "the built enroot says version '4.1.1': nothing installed" in p.stderr
    assert files_under(served["root"]) == []


def test_a_failed_enroot_build_installs_nothing(served, tmp_path):
    broken = {**enroot_files(), "bin/enroot-nsenter.c": "this is not C\n"}
    build_source(served["srv"] / "v4.1.2.tar.gz", "enroot-4.1.2", broken, ["deps/makeself/"])
    pin = f"git-tree:{git_tree_of(broken, tmp_path, {'deps/makeself': MAKESELF_COMMIT})}" \
          f",deps/makeself={MAKESELF_COMMIT}"
    p = run_install(write_pins(served, enroot=pin), served["root"], inc=served["inc"])
    assert p.returncode == 1 and "Enroot 4.1.2: build failed" in p.stderr, p.stderr
    assert "nothing installed" in p.stderr.strip().splitlines()[-1]
    assert files_under(served["root"]) == []


def test_a_git_archive_with_a_submodule_and_a_symlink_passes_its_tree_id(tmp_path):
    """What GitHub serves for a tag is `git archive` of it: the check must accept exactly that
    (a gitlink as an empty folder, a symlink, an executable) and nothing else."""
    repo = tmp_path / "repo"
    (repo / "bin").mkdir(parents=True)
    (repo / "bin/run.sh").write_text("#!/bin/sh\n")
    (repo / "bin/run.sh").chmod(0o755)
    (repo / "README").write_text("x\n")
    (repo / "link").symlink_to("bin/run.sh")
    g = ["-C", str(repo)]
    git(*g, "init", "-q")
    git(*g, "add", ".")
    git(*g, "update-index", "--add", "--cacheinfo", f"160000,{MAKESELF_COMMIT},deps/sub")
    git(*g, "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm", "x")
    tree = git(*g, "rev-parse", "HEAD^{tree}")
    archive = tmp_path / "v1.tar.gz"
    git(*g, "archive", "--format=tar.gz", "--prefix=repo-1/", "-o", str(archive), "HEAD")
    pins = tmp_path / "pins"
    for links, rc in ((f",deps/sub={MAKESELF_COMMIT}", 0), ("", 1), (f",deps/sub={'1' * 40}", 1)):
        pins.write_text(f"x 1 src git-tree:{tree}{links} {archive.as_uri()}\n")
        p = subprocess.run([sys.executable, str(FETCH), "--pins", str(pins), str(tmp_path / "out"),
                            "x:src"], capture_output=True, text=True)
        assert p.returncode == rc, (links, p.stderr)


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
    assert "ENROOT_PYXIS_TOOLS=DIR" in line and "github.com (NVIDIA/enroot, megastep/makeself" in line


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


def test_the_real_pins_are_well_formed_and_every_artifact_is_verifiable():
    for item, version in (("enroot:src", "4.1.2"), ("makeself:src", "2.4.5"), ("pyxis:src", "0.24.0")):
        p = subprocess.run([sys.executable, str(FETCH), "--pins", str(PINS), "--version", item],
                           capture_output=True, text=True, check=True)
        assert p.stdout.strip() == version
    pins = {}
    for raw in PINS.read_text().splitlines():
        fields = raw.split("#", 1)[0].split()
        if fields:
            pins[fields[0]] = fields
            assert fields[3].startswith(("sha256:", "git-tree:")), raw  # no `none` left
            assert fields[4].startswith(("https://github.com/NVIDIA/",
                                         "https://github.com/megastep/makeself/")), raw
    assert sorted(pins) == ["enroot", "makeself", "pyxis"]
    # Enroot's tag has three submodules: its archive is checked against the tag's tree with them.
    links = dict(x.split("=") for x in pins["enroot"][3].split(",")[1:])
    assert sorted(links) == ["deps/linux-headers", "deps/makeself", "deps/musl"]
    assert links["deps/makeself"] == MAKESELF_COMMIT


def test_bad_pins_and_usage_are_one_line(tmp_path):
    pins = tmp_path / "pins"
    pins.write_text("enroot 4.1.2 amd64 md5:abc https://x/y.deb\n")
    p = subprocess.run([sys.executable, str(FETCH), "--pins", str(pins), str(tmp_path), "enroot:amd64"],
                       capture_output=True, text=True)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and ":1:" in p.stderr
    # An artifact pinned `none` is refused before any network access (exit 4).
    pins.write_text("enroot 4.1.2 src none https://x/y.tar.gz\n")
    p = subprocess.run([sys.executable, str(FETCH), "--pins", str(pins), "/nonexistent/out",
                        "enroot:src"], capture_output=True, text=True)
    assert p.returncode == 4 and "not downloading it unchecked" in p.stderr
    p = subprocess.run(["bash", str(INSTALL), "--root", "relative"], capture_output=True, text=True)
    assert p.returncode == 2 and "absolute path" in p.stderr
