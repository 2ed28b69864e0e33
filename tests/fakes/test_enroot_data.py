"""Ring 2: Enroot's data path is the site's. Without `runtime.data_path` the enroot job exports
no ENROOT_DATA_PATH and its set-up (lock, partial trees, old containers) works in the path Enroot
itself uses: the site's enroot.conf or drop-in, else Enroot's default under
$XDG_DATA_HOME/$HOME; asked with `enroot info` (Enroot >= 4.0) or by Enroot's rule (3.x);
`runtime.data_path` is exported. The doctor's `space` cell measures that path and crosses tmpfs.

The fake enroot (tests/helpers/fake.py) resolves its path as enroot.in does and records it.
"""

import json
from pathlib import Path
from typing import Iterator

import pytest
import yaml

from launcher.node.doctor.local import fs_type, space
from launcher.features.preflight import node_config
from launcher.spec import parse_spec
from tests.helpers.cluster import Cluster, cleaned


@pytest.fixture
def fakes(tmp_path: Path) -> Iterator[Cluster]:
    yield from cleaned(Cluster(tmp_path, "submit_dir"))


def spec_text(**runtime: object) -> str:
    return yaml.safe_dump({
        "job": {"nodes": 2, "gpus_per_node": 2}, "site": "jsc",
        "runtime": {"kind": "enroot", "image": "image.sqsh", **runtime},
        "program": ["python3", "-c", "pass"]})


def run(fakes: Cluster, text: str, **env: str) -> tuple:
    (fakes.dir / "image.sqsh").write_text("squashfs")
    before = len(fakes.records("enroot"))
    done = fakes.run(fakes.render(text), **env)
    assert done.returncode == 0, done.stdout + done.stderr
    calls = [r for r in fakes.records("enroot")[before:] if r["argv"][0] in ("create", "start")]
    assert {r["argv"][0] for r in calls} == {"create", "start"}
    return done, calls


def site_conf(fakes: Cluster) -> Path:
    return Path(fakes.env["PATH"].split(":", 1)[0]).parent / "etc-enroot" / "enroot.conf"


@pytest.mark.parametrize("version", ["4.1.2", "3.5.0"])
def test_site_conf_decides_without_data_path(fakes, version):
    """A drop-in of the site's config (as the lab's 90-torchrun-jsc-lab.conf) names the path;
    enroot.conf names none. 4.1.2 answers `enroot info`; 3.5.0 has no `info`: Enroot's rule."""
    site_conf(fakes).write_text("# the site's enroot.conf, without a data path\n")
    dropin = site_conf(fakes).parent / "enroot.conf.d"
    dropin.mkdir()
    want = f"/tmp/enroot-{fakes.env['FAKE_USER']}/site-${{UID}}"
    (dropin / "90-site.conf").write_text(f"ENROOT_DATA_PATH   {want}\n")
    done, calls = run(fakes, spec_text(), FAKE_ENROOT_VERSION=version, UID="77")
    where = want.replace("${UID}", "77")
    assert all(r["data"] == where and "ENROOT_DATA_PATH" not in r["env"] for r in calls)
    assert "export ENROOT_DATA_PATH" not in fakes.render(spec_text()).read_text()
    assert Path(where, ".lock").is_file() and not list(Path(where).glob(".partial-*"))
    assert "enroot: creating container" in done.stdout
    asked = [r["argv"] for r in fakes.records("enroot") if r["argv"][0] == "info"]
    assert len(asked) == 2  # once per node: the set-up asks Enroot on each node


@pytest.mark.parametrize("version", ["4.1.2", "3.5.0"])
def test_no_site_conf_means_enroots_default(fakes, tmp_path, version):
    """No enroot.conf at all: Enroot's default ${XDG_DATA_HOME:-$HOME/.local/share}/enroot."""
    site_conf(fakes).unlink()
    home = tmp_path / "home"
    env = dict(fakes.env, HOME=str(home))
    env.pop("XDG_DATA_HOME", None)
    fakes.env = env
    done, calls = run(fakes, spec_text(), FAKE_ENROOT_VERSION=version)
    want = home / ".local" / "share" / "enroot"
    assert all(r["data"] == str(want) for r in calls), {r["data"] for r in calls}
    assert (want / ".lock").is_file()
    assert [p.name for p in want.iterdir() if not p.name.startswith(".")] \
        and not list(want.glob(".partial-*"))
    fakes.env = dict(env, XDG_DATA_HOME=str(tmp_path / "xdg"))
    done, calls = run(fakes, spec_text(), FAKE_ENROOT_VERSION=version)
    assert {r["data"] for r in calls} == {str(tmp_path / "xdg" / "enroot")}


def test_explicit_data_path_is_exported_over_the_site_conf(fakes):
    text = spec_text(data_path="/tmp/enroot-{user}/mine")
    assert 'export ENROOT_DATA_PATH="/tmp/enroot-${enroot_user}/mine"' in \
        fakes.render(text).read_text()
    done, calls = run(fakes, text)
    want = f"/tmp/enroot-{fakes.env['FAKE_USER']}/mine"
    assert all(r["data"] == want and r["env"]["ENROOT_DATA_PATH"] == want for r in calls)
    assert Path(want, ".lock").is_file()
    assert not Path(f"/tmp/enroot-{fakes.env['FAKE_USER']}/config-data").exists()


MOUNTS = """/dev/vda1 / ext4 rw 0 0
tmpfs /tmp tmpfs rw,nosuid 0 0
/dev/nvme0n1 /tmp/local\\040disk xfs rw 0 0
"""


def test_fs_type_takes_the_longest_mount_point():
    assert fs_type("/tmp/enroot-1/data", MOUNTS) == "tmpfs"
    assert fs_type("/tmp/local disk/enroot", MOUNTS) == "xfs"
    assert fs_type("/tmpfoo/x", MOUNTS) == "ext4"
    assert fs_type("/tmp", MOUNTS) == "tmpfs"


def doctor_conf(fakes: Cluster, **runtime: object) -> dict:
    (fakes.dir / "image.sqsh").write_text("squashfs")
    conf = node_config(parse_spec(spec_text(**runtime), "t.yaml"))
    return json.loads(json.dumps(conf)) | {"image": str(fakes.dir / "image.sqsh")}


def test_doctor_space_measures_enroots_path_and_crosses_tmpfs(fakes, tmp_path):
    """The cell asks the same function as the set-up; on tmpfs a cross with the fix."""
    conf = doctor_conf(fakes)
    want = f"/tmp/enroot-{fakes.env['FAKE_USER']}/config-data"
    disk = tmp_path / "mounts-disk"
    disk.write_text("/dev/vda1 / ext4 rw 0 0\n")
    got = space(conf, fakes.env, str(disk))
    assert got["ok"] is True and got["value"].endswith(" GiB free at " + want), got
    ram = tmp_path / "mounts-ram"
    ram.write_text(MOUNTS)
    got = space(conf, fakes.env, str(ram))
    assert got["ok"] is False and got["value"] == want + " (tmpfs)", got
    assert "set runtime.data_path (or the site's ENROOT_DATA_PATH" in got["cause"]
    (tmp_path / "local disk").mkdir()  # a disk mounted inside the tmpfs, as MOUNTS says
    ram.write_text(MOUNTS.replace("/tmp/local", str(tmp_path / "local")))
    mine = f"{tmp_path}/local disk/e"
    explicit = doctor_conf(fakes, data_path=mine)
    env = dict(fakes.env, ENROOT_DATA_PATH=mine)  # what the batch lines export
    got = space(explicit, env, str(ram))
    assert got["ok"] is True and got["value"].endswith(" GiB free at " + mine), got


def test_doctor_space_says_when_enroot_cannot_answer(fakes, tmp_path, monkeypatch):
    from launcher.node.doctor import local
    failing = tmp_path / "enroot-lib.sh"
    failing.write_text("enroot_data_path() { return 3; }\n")
    monkeypatch.setattr(local, "ENROOT_LIB", str(failing))
    got = space(doctor_conf(fakes), fakes.env)
    assert got == {"ok": False, "value": "",
                   "cause": "cannot tell Enroot's data path (enroot info, its enroot.conf)"}
