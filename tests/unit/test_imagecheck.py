"""Ring 1: `check --image`'s verdict on what an image has (launcher/render/imagecheck.py): python3 >= 3.8,
torch >= 1.9 and the commands the spec starts in it, each missing one named; the probe is the
real shell text, run here by sh against fake python3/torch/launcher commands on PATH."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from launcher.render import imagecheck
from launcher.spec import load_spec

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("output, wanted, have, problems", [
    ("python3 3.11\ntorch 2.13.0+cpu\ncommand accelerate\ncommand python3\n",
     ["accelerate", "python3"], "python3 3.11, torch 2.13.0+cpu, accelerate", []),
    ("python3 none\ncommand python3 none\n", ["python3"], "",
     ["no python3 (torchrun_jsc and the task scripts need python3 >= 3.8)",
      "no python3 on its PATH"]),
    ("python3 3.6\ntorch none\n", [], "python3 3.6",
     ["python3 3.6 (the kit needs >= 3.8)", "no torch for python3"]),
    ("python3 3.10\ntorch 1.8.1\ncommand deepspeed none\n", ["deepspeed"],
     "python3 3.10, torch 1.8.1", ["torch 1.8.1 (torchrun needs >= 1.9)",
                                   "no deepspeed on its PATH"]),
    ("python3 3.9\ntorch 1.9.0+cu111\n", [], "python3 3.9, torch 1.9.0+cu111", []),
])
def test_verdict(output, wanted, have, problems):
    assert imagecheck.verdict(output, wanted) == (have, problems)


def test_commands_are_the_launcher_and_the_program_not_the_kits():
    acc = load_spec(str(REPO / "jobs/sum_accelerate.yaml"))
    assert imagecheck.commands(acc) == ["accelerate", "python3"]
    torchrun = load_spec(str(REPO / "jobs/ddp_container.yaml"))  # torchrun_jsc: the kit's
    assert imagecheck.commands(torchrun) == ["python3"]


def fake_bin(tmp_path: Path, name: str, text: str) -> None:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + text)
    path.chmod(0o755)


def test_probe_text_reports_what_is_on_path(tmp_path):
    """PROBE as the image's sh runs it: python3 and torch asked, commands looked up."""
    fake_bin(tmp_path, "python3", 'case "$2" in *torch*) echo "torch 1.13.1" ;; '
             '*) echo "python3 3.10" ;; esac\n')
    fake_bin(tmp_path, "accelerate", "exit 0\n")
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin"}
    argv = imagecheck.probe_argv([], ["accelerate", "deepspeed"])
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=30, check=True)
    assert imagecheck.verdict(done.stdout, ["accelerate", "deepspeed"]) == (
        "python3 3.10, torch 1.13.1, accelerate", ["no deepspeed on its PATH"])
    env_no_python = {"PATH": f"{tmp_path / 'empty'}:/nonexistent"}
    done = subprocess.run(["/bin/sh", *argv[1:]], capture_output=True, text=True,
                          env=env_no_python, timeout=30, check=True)
    assert done.stdout.splitlines()[0] == "python3 none", done.stdout


def test_a_kit_on_a_node_local_filesystem_is_named(tmp_path):
    """launcher.kit.local_problem: tmpfs (by the doctor's one /proc/self/mounts parser) or a
    node-local directory is one reason; shared storage is none."""
    from launcher import kit

    mounts = ("/dev/vda / ext4 rw 0 0\ntmpfs /dev/shm tmpfs rw 0 0\n"
              "gpfs /p/project gpfs rw 0 0\ntmpfs /p/project/scratch\\040x tmpfs rw 0 0\n")
    assert kit.local_problem(Path("/p/project/me/kit/launcher"), mounts) is None
    on_tmpfs = kit.local_problem(Path("/p/project/scratch x/launcher"), mounts)
    assert on_tmpfs is not None and on_tmpfs.startswith(
        "the kit at /p/project/scratch x/launcher is on this node only (tmpfs): ")
    in_tmp = kit.local_problem(Path("/tmp/kit/launcher"), mounts)
    assert in_tmp is not None and "is on this node only (/tmp): " in in_tmp
