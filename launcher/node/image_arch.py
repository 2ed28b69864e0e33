"""Which CPU architecture an image is for, read without running it (standard library only).

Where it sits: ``jsc-compose check --image`` (login node) and the jobscript's node-side refusal
before the launch (``python3 -I "$kit/node/run.py" image-arch IMAGE``, launcher/node/job.sh
``jsc_image_arch``: ``node_arch_mismatch``, the image's architecture != this node's). Running an aarch64 image on
an x86_64 node ends in "exec format error" deep in a log (or, with qemu registered, in a very
slow emulated job); building on an x86_64 workstation for JUPITER's aarch64 Booster is the
common way to get there.

Sources, most specific first:
- SIF: the kit's label ``org.torchrun-jsc.arch`` (measured inside the image with dpkg when it
  was built) from the SIF's JSON metadata descriptor; else the architecture SIF records for its
  root filesystem partition (Apptainer writes the build's ``--arch``, by default the building
  host's).
- squashfs (Enroot/pyxis): ``/.singularity.d/labels.json`` when the squashfs came out of one of
  the kit's SIFs, else the ELF header of a binary in it (``unsquashfs -cat``; squashfs-tools).
"""

import json
import os
import struct
import subprocess
import sys
from typing import Dict, Mapping, NamedTuple, Optional, Sequence, Tuple

LABEL = "org.torchrun-jsc.arch"
ARCHES = ("x86_64", "aarch64")
# Debian/Go names and the kernel's (uname -m) for the same machines.
_ALIASES = {"amd64": "x86_64", "x86_64": "x86_64", "arm64": "aarch64", "aarch64": "aarch64"}
_ELF_MACHINES = {0x3E: "x86_64", 0xB7: "aarch64", 0x03: "i386", 0x28: "arm", 0x15: "ppc64le",
                 0x16: "s390x", 0xF3: "riscv64"}
# SIF (sylabs/sif v2): header arch codes, descriptor layout and types.
_SIF_ARCHES = {b"01": "i386", b"02": "x86_64", b"03": "arm", b"04": "aarch64", b"05": "ppc64",
               b"06": "ppc64le", b"07": "mips", b"08": "mipsle", b"09": "mips64",
               b"10": "mips64le", b"11": "s390x", b"12": "riscv64"}
_SIF_MAGIC = b"SIF_MAGIC\0"
_SIF_HEADER = struct.Struct("<32s10s3s3s16s8q")
_SIF_DESCRIPTOR = struct.Struct("<i?III7q128s384s")
_DATA_PARTITION, _DATA_GENERIC_JSON = 0x4004, 0x4006
_PART_PRIMSYS = 2
# Regular files (not symlinks) in Debian, Ubuntu and RHEL-like roots, for the ELF header.
_ELF_CANDIDATES = ("usr/bin/env", "bin/env", "usr/bin/ls", "bin/ls", "bin/busybox")


class ImageArchError(Exception):
    """The image cannot be read; the message is one line naming the image."""


class ImageArch(NamedTuple):
    arch: str    # normalized: x86_64, aarch64 (or another uname -m name)
    source: str  # where it was read: "label", "SIF partition", "ELF /usr/bin/env"


def normalize_arch(name: str) -> Optional[str]:
    """x86_64 or aarch64 for any of their spellings (amd64, arm64, ...), else None."""
    return _ALIASES.get(name.strip().lower())


def elf_arch(header: bytes) -> Optional[str]:
    """The machine an ELF header (its first 20 bytes or more) is for, None if not ELF."""
    if len(header) < 20 or header[:4] != b"\x7fELF":
        return None
    order = "<" if header[5] == 1 else ">"
    (machine,) = struct.unpack(order + "H", header[18:20])
    return _ELF_MACHINES.get(machine, f"elf-machine-{machine:#x}")


def read_sif(path: str) -> Tuple[Dict[str, str], Optional[str]]:
    """(labels, root partition arch) of a SIF file, from its descriptors; no Apptainer needed."""
    with open(path, "rb") as f:
        raw = f.read(_SIF_HEADER.size)
        if len(raw) < _SIF_HEADER.size or raw[32:42] != _SIF_MAGIC:
            raise ImageArchError(f"{path}: not a SIF image (no SIF_MAGIC header)")
        fields = _SIF_HEADER.unpack(raw)
        total, offset = fields[8], fields[9]
        f.seek(offset)
        labels: Dict[str, str] = {}
        partition = None
        for _ in range(max(0, min(total, 4096))):
            d = _SIF_DESCRIPTOR.unpack(f.read(_SIF_DESCRIPTOR.size))
            kind, used, data_off, size, extra = d[0], d[1], d[5], d[6], d[-1]
            if not used:
                continue
            if kind == _DATA_PARTITION:
                _, parttype, arch = struct.unpack("<ii3s", extra[:11])
                # the primary system partition wins over another system partition
                if parttype == _PART_PRIMSYS or (parttype == 1 and partition is None):
                    partition = _SIF_ARCHES.get(arch.rstrip(b"\0"))
            elif kind == _DATA_GENERIC_JSON and size < 16 << 20:
                here = f.tell()
                f.seek(data_off)
                labels.update(_labels_of(f.read(size)))
                f.seek(here)
    return labels, partition


def _labels_of(blob: bytes) -> Dict[str, str]:
    try:
        meta = json.loads(blob.decode("utf-8", "replace"))
    except ValueError:
        return {}
    labels = meta.get("data", {}).get("attributes", {}).get("labels") if isinstance(meta, dict) else None
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {}


def _unsquashfs_cat(path: str, member: str) -> Optional[bytes]:
    try:
        r = subprocess.run(["unsquashfs", "-cat", path, member], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=60)
    except FileNotFoundError:
        raise ImageArchError(f"{path}: reading a squashfs needs unsquashfs (Debian: "
                             "squashfs-tools)") from None
    except subprocess.TimeoutExpired:
        return None
    return r.stdout if r.returncode == 0 and r.stdout else None


def read_squashfs(path: str) -> ImageArch:
    labels = _unsquashfs_cat(path, ".singularity.d/labels.json")
    if labels:
        try:
            arch = normalize_arch(str(json.loads(labels.decode()).get(LABEL, "")))
        except (ValueError, AttributeError):
            arch = None
        if arch:
            return ImageArch(arch, "label")
    for member in _ELF_CANDIDATES:
        blob = _unsquashfs_cat(path, member)
        arch = elf_arch(blob[:64]) if blob else None
        if arch:
            return ImageArch(arch, f"ELF /{member}")
    raise ImageArchError(f"{path}: no architecture found (no {LABEL} label, none of "
                         f"{', '.join('/' + m for m in _ELF_CANDIDATES)} is an ELF binary)")


def image_arch(path: str) -> ImageArch:
    """The architecture of a SIF or squashfs image; ImageArchError in one line otherwise."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
    except OSError as exc:
        raise ImageArchError(f"{path}: cannot read image: {exc.strerror or exc}") from None
    if head[32:42] == _SIF_MAGIC:
        try:
            labels, partition = read_sif(path)
        except (OSError, struct.error) as exc:
            raise ImageArchError(f"{path}: cannot read SIF descriptors: {exc}") from None
        label = normalize_arch(labels.get(LABEL, ""))
        if label:
            return ImageArch(label, "label")
        if partition:
            return ImageArch(partition, "SIF partition")
        raise ImageArchError(f"{path}: SIF without a root filesystem partition architecture")
    if head[:4] in (b"hsqs", b"sqsh"):
        return read_squashfs(path)
    raise ImageArchError(f"{path}: neither a SIF nor a squashfs image")


def mismatch_line(image: str, arch: ImageArch, want: str, where: str, fix: bool = True) -> str:
    """One line: IMAGE is for A, WHERE is B, it would not run (and how to build for B)."""
    line = (f"{image}: image is {arch.arch} ({arch.source}), {where} is {want}: it would not "
            "run natively (exec format error, or very slow emulation where qemu is registered)")
    if fix:
        line += f"; build it for {want}: make image ARCH={_DEBIAN.get(want, want)}"
    return line


_DEBIAN = {"x86_64": "amd64", "aarch64": "arm64"}


def node_arch_mismatch(image: str, machine: Optional[str] = None) -> Optional[str]:
    """For the jobscript, on the node before the launch: None when IMAGE runs on this node's
    architecture (or cannot be read: the runtime will say why), else the one line to print
    before exiting. ``machine`` defaults to os.uname().machine."""
    found = _foreign(image, machine)
    return found[1] if found else None


def _foreign(image: str, machine: Optional[str] = None) -> Optional[Tuple[ImageArch, str]]:
    """(the image's architecture, the mismatch line) where IMAGE is for another architecture
    than this node's; None where it is not or cannot be read."""
    here = normalize_arch(machine or os.uname().machine) or (machine or os.uname().machine)
    try:
        arch = image_arch(image)
    except ImageArchError:
        return None
    if arch.arch == here:
        return None
    return arch, mismatch_line(image, arch, here, f"node {os.uname().nodename}")


EMULATE_VAR = "TORCHRUN_JSC_EMULATE"  # 1: run another architecture's image under qemu-user
BINFMT = "/proc/sys/fs/binfmt_misc"


def emulator(arch: str, binfmt: str = BINFMT) -> Optional[str]:
    """The enabled binfmt_misc entry (qemu-user) that runs ARCH's binaries here, or None."""
    path = os.path.join(binfmt, "qemu-" + arch)
    try:
        with open(path) as f:
            return path if f.readline().strip() == "enabled" else None
    except OSError:
        return None


def main(argv: Sequence[str], env: Optional[Mapping[str, str]] = None,
         binfmt: str = BINFMT) -> int:
    """``IMAGE``: exit 3 with the one line where IMAGE is for another architecture than this
    node's; 0 otherwise (also where it cannot be read: the runtime says why). With
    TORCHRUN_JSC_EMULATE=1 and qemu-user registered for the image's architecture, one warning
    line instead, and 0: the job runs emulated, many times slower (the lab's arm64 test)."""
    env = os.environ if env is None else env
    found = _foreign(argv[0]) if argv else None
    if found is None:
        return 0
    arch, line = found[0].arch, found[1]
    qemu = emulator(arch, binfmt)
    if env.get(EMULATE_VAR) == "1" and qemu:
        sys.stderr.write("warning: {} runs emulated ({}={}, {}): many times slower than on an "
                         "{} node\n".format(argv[0], EMULATE_VAR, env[EMULATE_VAR], qemu, arch))
        return 0
    sys.stderr.write(line + "\n")
    return 3
