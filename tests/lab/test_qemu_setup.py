"""Ring 3 (root): scripts/qemu-setup.sh registers qemu-user for arm64 from nothing, as on a
fresh Debian machine without systemd (issue 34): the qemu-aarch64 entry is removed from the
kernel (binfmt_misc registrations are global kernel state, so this is the machine's state, not a
copy) and binfmt_misc is unmounted in a private mount namespace; the script then mounts it,
installs qemu from apt when it never was (trixie's, once, about 20 s), writes the binfmt.d line
that update-binfmts cannot enable, and says so in one line. Checked afterwards from outside that
namespace: the entry has flag F and a hand-made aarch64 ELF runs in an empty chroot (no qemu
inside, as in a container's root filesystem), so the machine is left registered. Without root
the script refuses in one line, and so does a foreign-ARCH image build (before any work).

Assumes an x86_64 host, as the lab's.

Run by `make test-arm64` (marker ``emulated``), not by `make test`: on the CI machine's kernel of
2026-11-28 (6.18), an entry registered through one mount of binfmt_misc is not seen through
another (checked by hand: register in one private mount namespace, a fresh mount in the next
lists only register and status), so "checked afterwards from outside that namespace" fails
there for a reason outside the kit; the test must learn that kernel before it returns to CI."""

from __future__ import annotations

import struct
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.emulated

REPO = Path(__file__).resolve().parents[2]
QEMU_SETUP = REPO / "scripts" / "qemu-setup.sh"
BUILD_IMAGE = REPO / "scripts" / "build-image.sh"
BINFMT = "/proc/sys/fs/binfmt_misc"
MSG = b"aarch64 ok\n"


def aarch64_hello() -> bytes:
    """A static aarch64 ELF (no libc) that writes MSG and exits 0: write(1, msg, len);
    exit(0) as Linux syscalls 64 and 93. 211 bytes, made here so the test needs no download."""
    base = 0x400000
    code = [0xd2800020,                            # mov x0, #1
            0x100000e1,                            # adr x1, msg (28 bytes ahead)
            0xd2800000 | (len(MSG) << 5) | 2,      # mov x2, #len
            0xd2800808,                            # mov x8, #64 (write)
            0xd4000001,                            # svc #0
            0xd2800000,                            # mov x0, #0
            0xd2800ba8,                            # mov x8, #93 (exit)
            0xd4000001]                            # svc #0
    body = b"".join(struct.pack("<I", w) for w in code) + MSG
    total = 64 + 56 + len(body)
    ehdr = (b"\x7fELF\x02\x01\x01" + b"\0" * 9 +  # 64-bit, little endian, SysV
            struct.pack("<HHIQQQIHHHHHH", 2, 0xb7, 1, base + 120, 64, 0, 0, 64, 56, 1, 0, 0, 0))
    phdr = struct.pack("<IIQQQQQQ", 1, 5, 0, base, base, total, total, 0x1000)  # PT_LOAD, R+X
    return ehdr + phdr + body


# In a private mount namespace: remove the registration, unmount binfmt_misc, then the script.
FRESH = f"""set -u
b={BINFMT}
[ -e $b/register ] || mount -t binfmt_misc binfmt_misc $b
if [ -e $b/qemu-aarch64 ]; then echo -1 >$b/qemu-aarch64; fi
[ -e $b/qemu-aarch64 ] && {{ echo "STILL REGISTERED"; exit 9; }}
umount $b
[ -e $b/register ] && {{ echo "STILL MOUNTED"; exit 9; }}
echo "FRESH: not registered, binfmt_misc not mounted"
unshare --user bash {QEMU_SETUP} arm64 2>&1 >/dev/null | sed 's/^/NONROOT /'
ARCH=arm64 FAKEROOT=1 unshare --user bash {BUILD_IMAGE} base ngc 2>&1 >/dev/null | sed 's/^/BUILD /'
exec bash {QEMU_SETUP} arm64
"""


def test_registers_from_nothing_and_leaves_the_machine_registered(tmp_path: Path) -> None:
    done = subprocess.run(["unshare", "--mount", "--propagation", "private", "bash", "-c", FRESH],
                          capture_output=True, text=True, timeout=600)
    out = done.stdout.splitlines()
    assert done.returncode == 0, done.stdout + done.stderr
    assert out[0] == "FRESH: not registered, binfmt_misc not mounted", done.stdout
    # Without root: one line saying what to run, and nothing else.
    assert out[1] == ("NONROOT qemu-setup: qemu-aarch64 is not registered in "
                      f"{BINFMT} with flags F (or qemu is older than 8.1); as root: "
                      "bash scripts/qemu-setup.sh arm64"), done.stdout
    # A foreign-ARCH build without root stops before any work, with qemu-setup's line as cause.
    assert out[2] == ("BUILD build-image: ARCH=arm64 on this amd64 host needs qemu-user-static "
                      f"registered: qemu-aarch64 is not registered in {BINFMT} with flags F (or "
                      "qemu is older than 8.1); as root: bash scripts/qemu-setup.sh arm64"), \
        done.stdout
    assert all(ln.startswith("qemu-setup: installing qemu-user-static binfmt-support from ")
               for ln in out[3:-1]) and len(out) <= 5, done.stdout
    conf = Path("/usr/lib/binfmt.d/qemu-aarch64.conf")
    how = f"from {conf}" if conf.is_file() else "by update-binfmts"
    assert out[-1].startswith(f"qemu-setup: qemu-aarch64 registered {how} ("), done.stdout
    assert done.stderr == ""

    # Outside that namespace: the kernel keeps the entry, with F.
    entry = subprocess.run(["unshare", "--mount", "bash", "-c",
                            f"mount -t binfmt_misc binfmt_misc {BINFMT} 2>/dev/null; "
                            f"cat {BINFMT}/qemu-aarch64"],
                           capture_output=True, text=True, timeout=30)
    lines = entry.stdout.splitlines()
    assert lines[0] == "enabled", entry.stdout + entry.stderr
    flags = [ln.split(": ", 1)[1] for ln in lines if ln.startswith("flags: ")]
    assert flags and "F" in flags[0], entry.stdout

    # An aarch64 binary runs, also where the interpreter's path does not exist (a chroot with
    # nothing but the binary): the kernel opened qemu at registration (flag F).
    root = tmp_path / "root"
    root.mkdir()
    hello = root / "hello"
    hello.write_bytes(aarch64_hello())
    hello.chmod(0o755)
    for argv in ([str(hello)], ["chroot", str(root), "/hello"]):
        ran = subprocess.run(argv, capture_output=True, timeout=60)
        assert (ran.returncode, ran.stdout) == (0, MSG), (argv, ran)

    # Registered and new enough: a second run registers nothing again (it may mount
    # binfmt_misc here and say that the entry is there).
    again = subprocess.run(["bash", str(QEMU_SETUP), "arm64"], capture_output=True, text=True,
                           timeout=60)
    assert again.returncode == 0 and again.stderr == "", again
    assert again.stdout == "" or (again.stdout.startswith(
        f"qemu-setup: qemu-aarch64 registered ({flags[0]}, qemu ") and "\n" not in
        again.stdout[:-1]), again
