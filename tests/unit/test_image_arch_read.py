"""Ring 1: an image's architecture, read without running it (launcher/node/image_arch.py), and
`jsc-compose check --image` naming it: real SIF files (apptainer sif new/add) and real
squashfs images (mksquashfs), whose binaries are ELF headers of the machine under test.
Also the node-side refusal the jobscript calls before a launch (node_arch_mismatch) and the
spec's job.arch key.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.cli import _check_image, main
from launcher.node.image_arch import ImageArch, ImageArchError, elf_arch, image_arch, \
    node_arch_mismatch, normalize_arch

MACHINES = {"x86_64": 0x3E, "aarch64": 0xB7}
SIF_ARCH = {"x86_64": "2", "aarch64": "4"}


def elf_header(machine: str) -> bytes:
    """The 64-byte ELF64 little-endian header of an executable for ``machine``."""
    ident = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8)
    return ident + struct.pack("<HHIQQQIHHHHHH", 2, MACHINES[machine], 1, 0x400000, 64, 0, 0,
                               64, 56, 0, 64, 0, 0)


def squashfs(tmp: Path, machine: str, labels: dict | None = None, name: str = "img") -> Path:
    assert shutil.which("mksquashfs"), "mksquashfs missing: run `make setup` (squashfs-tools)"
    root = tmp / f"{name}-root"
    (root / "usr/bin").mkdir(parents=True)
    (root / "usr/bin/env").write_bytes(elf_header(machine) + bytes(100))
    if labels is not None:
        (root / ".singularity.d").mkdir()
        (root / ".singularity.d/labels.json").write_text(json.dumps(labels))
    out = tmp / f"{name}.sqsh"
    subprocess.run(["mksquashfs", str(root), str(out), "-quiet", "-noappend"], check=True,
                   capture_output=True, timeout=60)
    return out


def sif(tmp: Path, partition_machine: str, labels: dict | None = None, name: str = "img") -> Path:
    assert shutil.which("apptainer"), "apptainer missing: run `make setup`"
    out = tmp / f"{name}.sif"
    sqsh = squashfs(tmp, partition_machine, name=name + "-part")
    run = lambda *a: subprocess.run(["apptainer", "sif", *a], check=True,  # noqa: E731
                                    capture_output=True, timeout=60)
    run("new", str(out))
    if labels is not None:
        meta = tmp / f"{name}-meta.json"
        meta.write_text(json.dumps({"data": {"attributes": {"labels": labels}}}))
        run("add", "--datatype", "6", str(out), str(meta))
    run("add", "--datatype", "4", "--parttype", "2", "--partfs", "1", "--partarch",
        SIF_ARCH[partition_machine], str(out), str(sqsh))
    return out


def test_elf_header_names_the_machine() -> None:
    assert elf_arch(elf_header("aarch64")) == "aarch64"
    assert elf_arch(elf_header("x86_64")) == "x86_64"
    assert elf_arch(b"#!/bin/sh\n" + bytes(20)) is None
    # a real binary of this host
    assert elf_arch(Path(sys.executable).resolve().read_bytes()[:64]) == \
        normalize_arch(os.uname().machine)


def test_sif_partition_architecture(tmp_path) -> None:
    assert image_arch(str(sif(tmp_path, "aarch64"))) == ImageArch("aarch64", "SIF partition")


def test_the_kits_label_wins_over_the_partition(tmp_path) -> None:
    """A foreign build may record the building host in the partition; the label is measured
    inside the image."""
    image = sif(tmp_path, "x86_64", {"org.torchrun-jsc.arch": "arm64", "other": "x"})
    assert image_arch(str(image)) == ImageArch("aarch64", "label")


def test_squashfs_label_then_elf(tmp_path) -> None:
    labelled = squashfs(tmp_path, "x86_64", {"org.torchrun-jsc.arch": "arm64"}, name="a")
    assert image_arch(str(labelled)) == ImageArch("aarch64", "label")
    plain = squashfs(tmp_path, "aarch64", name="b")
    assert image_arch(str(plain)) == ImageArch("aarch64", "ELF /usr/bin/env")


def test_unreadable_images_are_one_line(tmp_path) -> None:
    text = tmp_path / "x.sif"
    text.write_text("not an image\n")
    with pytest.raises(ImageArchError, match=r"x\.sif: neither a SIF nor a squashfs image$"):
        image_arch(str(text))
    with pytest.raises(ImageArchError, match="cannot read image"):
        image_arch(str(tmp_path / "missing.sif"))


def test_node_side_refusal_names_both_architectures(tmp_path) -> None:
    image = str(sif(tmp_path, "aarch64"))
    assert node_arch_mismatch(image, machine="aarch64") is None
    line = node_arch_mismatch(image, machine="x86_64")
    assert line is not None and "\n" not in line
    assert line.startswith(f"{image}: image is aarch64 (SIF partition), node ")
    assert " is x86_64: it would not run natively (exec format error, or very slow emulation " \
           "where qemu is registered); build it for x86_64: " \
           "make image ARCH=amd64" in line
    # unreadable: the runtime's own error says more than a guess
    assert node_arch_mismatch(str(tmp_path / "none.sif"), machine="x86_64") is None


def test_normalize_arch() -> None:
    assert [normalize_arch(a) for a in ("amd64", "X86_64", "arm64", "aarch64", "ppc64le")] == \
        ["x86_64", "x86_64", "aarch64", "aarch64", None]


def spec(tmp: Path, image: Path, arch: str | None) -> Path:
    job = f"{{nodes: 2, arch: {arch}}}" if arch else "{nodes: 2}"
    path = tmp / "s.yaml"
    path.write_text(f"job: {job}\nruntime: {{kind: apptainer, image: {image}}}\n"
                    "program: [python3, t.py]\n")
    return path


LABELS = {"org.torchrun-jsc.arch": "arm64", "org.torchrun-jsc.launcher-version": "0.1.0"}


def test_check_image_names_the_architecture(tmp_path, capsys) -> None:
    """An image for job.arch, another than this host's (x86_64 here): named, not run here."""
    image = sif(tmp_path, "aarch64", LABELS)
    assert main(["check", "--image", str(spec(tmp_path, image, "aarch64"))]) == 0
    out = capsys.readouterr()
    assert "image: arch aarch64 (label), not run here (another architecture)" in out.out


def test_check_image_refuses_another_architecture_than_job_arch(tmp_path, capsys) -> None:
    image = sif(tmp_path, "aarch64", LABELS)
    path = spec(tmp_path, image, "x86_64")
    assert main(["check", "--image", str(path)]) == 1
    err = capsys.readouterr().err
    assert err == (f"{image}: image is aarch64 (label), {path}'s job.arch is x86_64: it would not "
                   "run natively (exec format error, or very slow emulation where qemu is "
                   "registered); build it for x86_64: make image ARCH=amd64\n")


def test_check_image_warns_when_this_host_differs(tmp_path, capsys, monkeypatch) -> None:
    image = sif(tmp_path, "aarch64", LABELS)
    from launcher.spec import load_spec
    assert _check_image(load_spec(str(spec(tmp_path, image, None))), "x86_64").endswith(
        "arch aarch64 (label), not run here (another architecture)")
    # On an aarch64 host it runs the image's probe (launcher.render.imagecheck), here answered.
    answer = subprocess.CompletedProcess([], 0, "python3 3.12\ntorch 2.13.0\ncommand python3\n", "")
    monkeypatch.setattr("launcher.cli.subprocess.run", lambda *a, **k: answer)
    assert _check_image(load_spec(str(spec(tmp_path, image, None))), "aarch64") == \
        "python3 3.12, torch 2.13.0, arch aarch64 (label)"
    err = capsys.readouterr().err.splitlines()
    assert [ln for ln in err if "it would not run" in ln] == [
        f"{image}: image is aarch64 (label), this host (x86_64) is x86_64: it would not run "
        "natively (exec format error, or very slow emulation where qemu is registered); set job.arch when the partition's architecture differs from "
        "this host's"]


@pytest.mark.parametrize("value,hint", [("arm64", "did you mean 'aarch64'?"),
                                        ("amd64", "did you mean 'x86_64'?"), ("sparc", "")])
def test_job_arch_is_validated_in_one_line(tmp_path, capsys, value, hint) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(f"job: {{nodes: 1, arch: {value}}}\nprogram: [python3, t.py]\n")
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "job.arch: the partition's CPU architecture: aarch64" in err
    assert hint in err and f"got '{value}'" in err


def test_the_jobscript_stops_on_its_first_node_for_another_architecture(tmp_path) -> None:
    """Ring 2: every container runtime's batch lines call the kit's jsc_image_arch with the
    image; run in bash on this machine, it stops (status 1, one line naming both
    architectures) for an image of the other architecture, and passes this machine's own,
    an unreadable file and an image that is not a file (a registry name)."""
    import os
    import subprocess

    from launcher import kit
    from launcher.render.jobscript import render_jobscript
    from tests.unit.test_spec_traps import parse

    for kind, image in (("apptainer", "x.sif"), ("enroot", "x.sqsh"), ("pyxis", "x.sqsh")):
        text = render_jobscript(parse(f"job: {{nodes: 1}}\nruntime: {{kind: {kind}, image: "
                                      f"{image}}}\nprogram: [p]\n"))
        assert f'jsc_image_arch "${{PWD}}/{image}" || exit 1' in text.splitlines() or \
            f"jsc_image_arch {image} || exit 1" in text.splitlines(), (kind, text)
    here = normalize_arch(os.uname().machine)
    other = "aarch64" if here == "x86_64" else "x86_64"
    package = kit.installed()
    version = (package / "__init__.py").read_text().split('__version__ = "')[1].split('"')[0]
    script = 'kit="$1"; source "$kit/node/job.sh" "$2" || exit 9; jsc_image_arch "$3" || exit 1'

    def run(image: str) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", "-c", script, "x", str(package), version, image],
                              capture_output=True, text=True, timeout=60, check=False)

    foreign = run(str(sif(tmp_path, other, name="foreign b")))
    assert foreign.returncode == 1
    assert foreign.stderr.splitlines() == [
        f"{tmp_path}/foreign b.sif: image is {other} (SIF partition), node {os.uname().nodename} "
        f"is {here}: it would not run natively (exec format error, or very slow emulation where "
        f"qemu is registered); build it for {here}: make image ARCH="
        f"{'amd64' if here == 'x86_64' else 'arm64'}"], foreign.stderr
    for ok in (str(sif(tmp_path, here, name="own")), str(tmp_path), "docker://x/y"):
        done = run(ok)
        assert (done.returncode, done.stderr) == (0, ""), (ok, done.stderr)
    (tmp_path / "junk.sif").write_text("not an image")
    assert run(str(tmp_path / "junk.sif")).returncode == 0


def test_emulation_only_when_asked_and_registered(tmp_path, capsys) -> None:
    """TORCHRUN_JSC_EMULATE=1 turns the refusal into one warning line where qemu-user is
    registered for the image's architecture (a faked binfmt_misc directory); asked without
    qemu, or qemu without being asked, the refusal stands."""
    import os

    from launcher.node.image_arch import main

    here = normalize_arch(os.uname().machine)
    other = "aarch64" if here == "x86_64" else "x86_64"
    image = str(sif(tmp_path, other))
    binfmt = tmp_path / "binfmt"
    binfmt.mkdir()
    assert main([image], {"TORCHRUN_JSC_EMULATE": "1"}, str(binfmt)) == 3
    (binfmt / f"qemu-{other}").write_text("enabled\ninterpreter /usr/bin/qemu\nflags: PF\n")
    assert main([image], {}, str(binfmt)) == 3
    assert " it would not run natively " in capsys.readouterr().err
    assert main([image], {"TORCHRUN_JSC_EMULATE": "1"}, str(binfmt)) == 0
    assert capsys.readouterr().err == (
        f"warning: {image} runs emulated (TORCHRUN_JSC_EMULATE=1, {binfmt}/qemu-{other}): "
        f"many times slower than on an {other} node\n")
    (binfmt / f"qemu-{other}").write_text("disabled\n")
    assert main([image], {"TORCHRUN_JSC_EMULATE": "1"}, str(binfmt)) == 3
