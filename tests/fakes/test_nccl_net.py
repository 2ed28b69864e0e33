"""Ring 2: site cray-ex's per-task NCCL rule (launcher/task/nccl-net.sh, sourced by the task
prelude hook.sh) run by sh on this machine: the net plugin found as NCCL finds it, and
NCCL_PROTO=^LL128 on aarch64 only, which hook.sh applies under every other profile too
(GH200's NIC-to-C2C path, NVIDIA/nccl#2053).

The plugin: NCCL_NET_PLUGIN's names (as given, then libnccl-net-NAME.so; `none`: no plugin),
else libnccl-net.so (RCCL: librccl-net.so), looked for in LD_LIBRARY_PATH, the ld.so cache
(a fake `ldconfig -p` on PATH) and the default directories; found: NCCL_NET="AWS Libfabric" (the
name every aws-ofi-nccl release answers to); a plugin NCCL does not load by default (NGC's libnccl-net-aws.so) is named with the NCCL_NET_PLUGIN that
would load it, and not chosen. The architecture comes from a fake `uname`. A NCCL_NET or
NCCL_PROTO the job or image set is kept; only node 0's first task speaks, in one line.
"""

import subprocess
from pathlib import Path
from typing import Dict, Optional

import pytest

from launcher import kit

HOOK = kit.installed() / "task" / "hook.sh"
SHOW = 'printf "%s|%s|%s" "${NCCL_NET-unset}" "${NCCL_PROTO-unset}" "${NCCL_NET_PLUGIN-unset}"'


def fake_bin(tmp_path: Path, arch: str = "x86_64", cache: Optional[Dict[str, str]] = None) -> Path:
    """A PATH directory with `uname` (answers ARCH) and `ldconfig` (-p: CACHE's entries, in
    ldconfig's own format)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "uname").write_text(f"#!/bin/sh\necho {arch}\n")
    entries = "".join(f"\t{name} (libc6,x86-64) => {path}\n"
                      for name, path in (cache or {}).items())
    (bin_dir / "ldconfig").write_text(
        f"#!/bin/sh\nprintf '%s entries found in cache\\n' {len(cache or {})}\n"
        f"printf '%s' '{entries}'\n")
    for tool in ("uname", "ldconfig"):
        (bin_dir / tool).chmod(0o755)
    return bin_dir


def hook(tmp_path: Path, bin_dir: Path, **env: str) -> subprocess.CompletedProcess:
    """hook.sh under cray-ex (TORCHRUN_JSC_OFI_NCCL=1), on node 0's first task unless ENV
    says otherwise; it execs SHOW."""
    base = {"PATH": f"{bin_dir}:/usr/bin:/bin", "TORCHRUN_JSC_OFI_NCCL": "1",
            "SLURM_NODEID": "0", "SLURM_LOCALID": "0"}
    return subprocess.run(["sh", str(HOOK), "sh", "-c", SHOW], capture_output=True, text=True,
                          env={**base, **env}, cwd=tmp_path, timeout=30, check=True)


def lib_dir(tmp_path: Path, *names: str, where: str = "ofi lib") -> Path:
    folder = tmp_path / where
    folder.mkdir(exist_ok=True)
    for name in names:
        (folder / name).write_text("")
    return folder


def test_default_name_on_the_library_path_sets_ofi(tmp_path):
    lib = lib_dir(tmp_path, "libnccl-net.so")
    done = hook(tmp_path, fake_bin(tmp_path), LD_LIBRARY_PATH=f"/nonexistent::{lib}")
    assert done.stdout == "AWS Libfabric|unset|unset"
    assert done.stderr == f"torchrun-jsc: NCCL net plugin {lib}/libnccl-net.so (NCCL's " \
        "default name): NCCL_NET=\"AWS Libfabric\"\n"


def test_rccl_plugin_and_the_ld_cache_count(tmp_path):
    lib = lib_dir(tmp_path, "librccl-net.so", where="rocm")
    cached = hook(tmp_path, fake_bin(tmp_path, cache={"librccl-net.so": str(lib / "librccl-net.so")}))
    assert cached.stdout == "AWS Libfabric|unset|unset"
    assert f"plugin {lib}/librccl-net.so (NCCL's default name)" in cached.stderr


def test_ngc_plugin_nccl_does_not_load_is_named_not_chosen(tmp_path):
    lib = lib_dir(tmp_path, "libnccl-net-aws.so")
    done = hook(tmp_path, fake_bin(tmp_path), LD_LIBRARY_PATH=str(lib))
    assert done.stdout == "unset|unset|unset"  # NCCL would not load it: nothing forced
    assert done.stderr.count("\n") == 1
    assert done.stderr.startswith(
        "torchrun-jsc: no NCCL net plugin NCCL loads by default (libnccl-net.so, "
        f"librccl-net.so), but {lib}/libnccl-net-aws.so (NCCL_NET_PLUGIN=aws in env.set loads "
        "it): NCCL between nodes runs over TCP sockets"), done.stderr


@pytest.mark.parametrize("plugin, file", [
    ("aws", "libnccl-net-aws.so"),  # NCCL's short form: libnccl-net-NAME.so
    ("libnccl-net-aws.so", "libnccl-net-aws.so"),  # a library name, as given
])
def test_nccl_net_plugin_is_followed(tmp_path, plugin, file):
    lib = lib_dir(tmp_path, file, "libnccl-net.so")
    done = hook(tmp_path, fake_bin(tmp_path), LD_LIBRARY_PATH=str(lib), NCCL_NET_PLUGIN=plugin)
    assert done.stdout == f"AWS Libfabric|unset|{plugin}"  # the image's or user's choice stays
    assert done.stderr == f"torchrun-jsc: NCCL net plugin {lib}/{file} " \
        f"(NCCL_NET_PLUGIN={plugin}): NCCL_NET=\"AWS Libfabric\"\n"


def test_a_path_and_none(tmp_path):
    lib = lib_dir(tmp_path, "libnccl-net.so", "custom.so")
    path = hook(tmp_path, fake_bin(tmp_path), NCCL_NET_PLUGIN=str(lib / "custom.so"))
    assert path.stdout.startswith("AWS Libfabric|")
    # `none`: NCCL loads no plugin, even with libnccl-net.so right there.
    none = hook(tmp_path, fake_bin(tmp_path), LD_LIBRARY_PATH=str(lib), NCCL_NET_PLUGIN="none")
    assert none.stdout == "unset|unset|none"
    assert none.stderr.startswith("torchrun-jsc: no NCCL net plugin (NCCL_NET_PLUGIN=none): ")


def test_a_plugin_name_that_finds_nothing(tmp_path):
    done = hook(tmp_path, fake_bin(tmp_path), LD_LIBRARY_PATH="/nonexistent",
                NCCL_NET_PLUGIN="ofi")
    assert done.stdout == "unset|unset|ofi"
    assert done.stderr.startswith(
        "torchrun-jsc: no NCCL net plugin (aws-ofi-nccl; tried ofi, libnccl-net-ofi.so, "
        "librccl-net-ofi.so): NCCL between nodes runs over TCP sockets"), done.stderr
    assert done.stderr.count("\n") == 1


def test_aarch64_gets_no_ll128_and_what_was_set_is_kept(tmp_path):
    lib = lib_dir(tmp_path, "libnccl-net.so")
    grace = hook(tmp_path, fake_bin(tmp_path, arch="aarch64"), LD_LIBRARY_PATH=str(lib))
    assert grace.stdout == "AWS Libfabric|^LL128|unset"
    assert grace.stderr.count("\n") == 1
    assert grace.stderr.endswith("NCCL_NET=\"AWS Libfabric\"; aarch64 (Grace): NCCL_PROTO=^LL128 "
                                 "(NVIDIA/nccl#2001)\n")
    kept = hook(tmp_path, fake_bin(tmp_path, arch="aarch64"), LD_LIBRARY_PATH=str(lib),
                NCCL_NET="OFI", NCCL_PROTO="Simple")
    assert (kept.stdout, kept.stderr) == ("OFI|Simple|unset", "")


def test_only_node_0_task_0_speaks_and_only_under_cray_ex(tmp_path):
    lib = lib_dir(tmp_path, "libnccl-net.so")
    bin_dir = fake_bin(tmp_path, arch="aarch64")
    for where in ({"SLURM_NODEID": "3"}, {"SLURM_LOCALID": "1"}):
        other = hook(tmp_path, bin_dir, LD_LIBRARY_PATH=str(lib), **where)
        assert (other.stdout, other.stderr) == ("AWS Libfabric|^LL128|unset", "")
    # Other profiles: no net plugin rule, but the same LL128 rule (issue 43 item 7).
    off = hook(tmp_path, bin_dir, LD_LIBRARY_PATH=str(lib), TORCHRUN_JSC_OFI_NCCL="")
    assert (off.stdout, off.stderr) == (
        "unset|^LL128|unset", "torchrun-jsc: aarch64 (Grace): NCCL_PROTO=^LL128 "
        "(NVIDIA/nccl#2053)\n")


@pytest.mark.parametrize("arch, env, shown, said", [
    ("aarch64", {"SLURM_NODEID": "1"}, "unset|^LL128|unset", ""),
    ("aarch64", {"NCCL_PROTO": "Simple"}, "unset|Simple|unset", ""),
    ("x86_64", {}, "unset|unset|unset", "")])
def test_the_ll128_rule_under_every_other_profile(tmp_path, arch, env, shown, said):
    """Site jsc (JUPITER, JEDI: GH200 over InfiniBand) and generic: LL128 off on aarch64, a
    NCCL_PROTO the job set kept, x86_64 untouched; only node 0's first task speaks."""
    done = hook(tmp_path, fake_bin(tmp_path, arch=arch), TORCHRUN_JSC_OFI_NCCL="", **env)
    assert (done.stdout, done.stderr) == (shown, said)



def test_an_image_without_awk_still_finds_the_plugin_quietly(tmp_path):
    """Only sh's builtins and the fakes on PATH: the library path still counts, and nothing
    but the one line reaches the log."""
    lib = lib_dir(tmp_path, "libnccl-net.so")
    env = {"PATH": str(fake_bin(tmp_path)), "TORCHRUN_JSC_OFI_NCCL": "1",
           "LD_LIBRARY_PATH": str(lib)}
    done = subprocess.run(["/bin/sh", str(HOOK), "/bin/sh", "-c", SHOW], capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=30, check=True)
    assert done.stdout == "AWS Libfabric|unset|unset"
    assert done.stderr == f"torchrun-jsc: NCCL net plugin {lib}/libnccl-net.so (NCCL's " \
        "default name): NCCL_NET=\"AWS Libfabric\"\n"
    missing = subprocess.run(["/bin/sh", str(HOOK), "/bin/sh", "-c", SHOW], capture_output=True,
                             text=True, env={**env, "LD_LIBRARY_PATH": "/nonexistent"},
                             cwd=tmp_path, timeout=30, check=True)
    assert missing.stderr.startswith("torchrun-jsc: no NCCL net plugin (aws-ofi-nccl; tried "
                                     "libnccl-net.so, librccl-net.so): NCCL between nodes"), \
        missing.stderr
    assert missing.stderr.count("\n") == 1
