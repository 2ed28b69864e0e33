"""The recording-fakes cluster for ring 2 (tests/fakes): a submit directory with the fakes of
tests/helpers/fake.py on PATH that runs a rendered script as a Slurm batch step would, and
the hostile values every ring-2 test sends through it."""

import os
import shutil
import subprocess
import textwrap
from pathlib import Path
from typing import Iterator, List

from launcher.render.jobscript import render_jobscript
from launcher.spec import parse_spec
from tests.helpers import fake

HOSTILE = "sp ace 'sq' \"dq\" ;semi $(touch pwned) `id` \\bs ü日本 $HOME %x"
HOSTILE_NAME = HOSTILE.replace("\\", "")  # Slurm cannot put a backslash in file names
HOSTILE_NL = HOSTILE + "\nsecond line"


class Cluster:
    """A temp submit dir with fakes on PATH; runs scripts as a Slurm batch step would."""

    def __init__(self, tmp: Path, name: str = "submit dir ü") -> None:
        self.dir = tmp / name
        self.dir.mkdir()
        self.log = tmp / "log"
        self.env = dict(os.environ, **fake.install(tmp / "bin", self.log))
        for key in ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "RANK", "NCCL_DEBUG",
                    "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "SYSTEMNAME"):
            self.env.pop(key, None)

    def run(self, script: Path, nodes: int = 2, **extra: str) -> subprocess.CompletedProcess:
        env = dict(self.env, SLURM_JOB_ID="4242", SLURM_JOB_NAME=script.stem,
                   SLURM_JOB_NUM_NODES=str(nodes),
                   SLURM_JOB_NODELIST=f"jwb[0001-{nodes:04d}]",
                   SLURM_JOB_CPUS_PER_NODE=f"48(x{nodes})")
        env.update(extra)
        return subprocess.run(["bash", str(script)], cwd=self.dir, env=env, capture_output=True,
                              text=True, timeout=60, check=False)

    def records(self, prog: str = "") -> List[dict]:
        return fake.records(self.log, prog)

    def render(self, text: str, name: str = "t.yaml") -> Path:
        spec = parse_spec(textwrap.dedent(text), name)
        script = self.dir / name.replace(".yaml", ".job")
        script.write_text(render_jobscript(spec), encoding="utf-8")
        return script


def cleaned(cluster: Cluster) -> Iterator[Cluster]:
    """The cluster, then its per-user Enroot data paths (node-local /tmp, as in the jobs) go."""
    yield cluster
    for path in fake.enroot_paths(cluster.env):
        shutil.rmtree(path, ignore_errors=True)
