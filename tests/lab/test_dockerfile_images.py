"""Ring 3: `make image DOCKERFILE=...` (issue 44) builds a project's Dockerfile without Docker,
from a registry on loopback, and the image runs the project as `docker run` would.

One build, shared by every test here: the lab's base (``build/base-local.sif``: Debian, torch)
as a registry image with a banner ENTRYPOINT (NGC's kind: it prints, then runs the command;
tests/helpers/entrypoint_images.py's layout) pushed to Debian's docker-registry on 127.0.0.1,
and a two-stage Dockerfile on it: an ARG-driven base, a builder stage whose artifact the final
stage copies (``COPY --from``), ARG overridden with DOCKER_BUILD_ARGS, ENV (one value with a
blank), WORKDIR, a local COPY, a RUN, USER and EXPOSE (named, not carried over), and CMD
without ENTRYPOINT. ``make image enroot-image DOCKERFILE=...`` converts it, pulls the base as
Apptainer does (``APPTAINER_NOHTTPS``: the lab's registry speaks plain HTTP), builds, puts the
launcher layer on top (its %test: a 2-process all_reduce through ``torchrun_jsc``) and dumps
the squashfs. Then: ``apptainer run`` starts in WORKDIR with the ENV, the CMD under the base's
ENTRYPOINT, arguments replacing CMD; the builder's artifact is there and its steps are not;
``torchrun_jsc`` and the labels; Enroot's /etc/environment; and one 2-node torchrun job in the
image (world size 4 over both nodes, the image's ENV seen by every rank).
Expected: about 8 min on the 2-core lab VM with build/base-local.sif cached (the base's OCI
layout and push 1-2 min, `make` 3-4 min: the Dockerfile's two stages, the launcher layer and
its %test, the squashfs without /dev's nodes; the run checks and the job 2 min). The build and
the checks before the job passed on 2026-11-28 with a 203 MiB stand-in base (the host's
Python and CPU torch, a banner ENTRYPOINT) from the same kind of loopback registry, outside
the lab: `make` 119 s at load average 9.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import entrypoint_images
from tests.helpers.labjobs import make

REPO = Path(__file__).resolve().parents[2]
PY = str(Path(os.environ.get("VENV", REPO / ".venv")) / "bin" / "python")
NAME = "lab-dockerfile"  # DOCKERFILE_NAME: image-lab-dockerfile.sif, not a user's image-proj.sif
BANNER = f"{entrypoint_images.MARK}BANNER: === lab image with a banner entrypoint ==="
DOCKERFILE = """\
ARG REGISTRY=registry.invalid
ARG BASE=lab/torch:1
FROM ${REGISTRY}/${BASE} AS builder
WORKDIR /src
COPY greet/ greet/
RUN mkdir -p /out && cp -r greet /out/ && echo built-by-builder >/out/artifact.txt

FROM ${REGISTRY}/${BASE}
ARG MESSAGE=default
ENV APP_HOME=/opt/app MESSAGE_AT_BUILD=$MESSAGE SPACED="two words"
WORKDIR $APP_HOME
COPY --from=builder /out/ ./
COPY program.py .
RUN python3 -c "import torch; print(torch.__version__)" >torch-version.txt
USER 1000
EXPOSE 29500
CMD ["python3", "program.py", "--from-cmd"]
"""
PROGRAM = """\
import json, os, socket, sys
from greet import hello  # from the builder stage, next to this file
report = {"cwd": os.getcwd(), "argv": sys.argv[1:], "hello": hello(),
          "message": os.environ.get("MESSAGE_AT_BUILD"), "spaced": os.environ.get("SPACED"),
          "artifact": open("/opt/app/artifact.txt").read().strip()}
if "WORLD_SIZE" in os.environ:
    import torch, torch.distributed as dist
    dist.init_process_group("gloo")
    t = torch.tensor([dist.get_rank() + 1.0])
    dist.all_reduce(t)
    hosts = [None] * dist.get_world_size()
    dist.all_gather_object(hosts, socket.gethostname())
    messages = [None] * dist.get_world_size()
    dist.all_gather_object(messages, report["message"])
    report.update(world_size=dist.get_world_size(), sum=t.item(), hosts=sorted(set(hosts)),
                  messages=sorted(set(messages)))
    # every rank leaves the group before any exits: a rank that exited while gloo's threads
    # still ran aborted ("terminate called without an active exception", CI run 5)
    rank = dist.get_rank()
    dist.barrier()
    dist.destroy_process_group()
    if rank != 0:
        sys.exit(0)
print("DOCKERFILE_REPORT " + json.dumps(report), flush=True)
"""
SPEC = """\
job:
  nodes: 2
  time: "00:05:00"
  partition: batch
site: jsc
runtime:
  kind: apptainer
  image: {image}
launch:
  mode: torchrun
  procs_per_node: 2
program: [python3, -u, /opt/app/program.py, --job]
"""


@dataclass(frozen=True)
class Built:
    image: Path
    sqsh: Path
    log: str
    work: Path


def report(text: str) -> dict:
    found = [line.split("DOCKERFILE_REPORT ", 1)[1] for line in text.splitlines()
             if "DOCKERFILE_REPORT " in line]  # a job's lines may carry a rank prefix
    assert len(found) == 1, text
    return json.loads(found[0])


def run(*argv: str, timeout: float = 300) -> str:
    p = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)
    assert p.returncode == 0, f"{' '.join(argv)}: rc {p.returncode}\n{p.stdout}\n{p.stderr}"
    return p.stdout


def project(work: Path) -> Path:
    proj = work / "proj"
    (proj / "greet").mkdir(parents=True)
    (proj / "Dockerfile").write_text(DOCKERFILE)
    (proj / "program.py").write_text(PROGRAM)
    (proj / "greet" / "__init__.py").write_text("def hello():\n    return 'hello from greet'\n")
    return proj


@pytest.fixture(scope="module")
def built():
    """The one build: base pushed to a loopback registry, `make image enroot-image`."""
    make("build/base-local.sif")
    (REPO / "build/lab-tmp").mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="dockerfile-", dir=REPO / "build/lab-tmp"))
    work.chmod(0o1777)
    proj = project(work)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="dockerfile-oci.",
                                     dir=entrypoint_images.scratch()) as tmp_s:
        tmp = Path(tmp_s)
        layout = entrypoint_images.oci_layout(tmp)
        (tmp / "reg").mkdir()
        registry = entrypoint_images.Registry(tmp / "reg")
        try:
            run("skopeo", "--insecure-policy", "copy", "--quiet", "--dest-tls-verify=false",
                "--format", "v2s2", f"oci:{layout}:banner",
                f"docker://{registry.addr}/lab/torch:1")
            pushed = time.monotonic()
            env = dict(os.environ, APPTAINER_NOHTTPS="1", DOCKERFILE_NAME=NAME,
                       DOCKER_BUILD_ARGS=f"REGISTRY={registry.addr} MESSAGE=overridden",
                       APPTAINER_CACHEDIR=str(work / "apptainer-cache"))
            p = subprocess.run(["make", "image", "enroot-image", f"DOCKERFILE={proj}/Dockerfile"],
                               capture_output=True, text=True, timeout=1800, cwd=REPO, env=env,
                               check=False)
        finally:
            registry.close()
    log = p.stdout + p.stderr
    assert p.returncode == 0, log[-6000:]
    print(f"dockerfile image: base layout and push {pushed - started:.0f} s, make "
          f"{time.monotonic() - pushed:.0f} s")
    yield Built(REPO / f"image-{NAME}.sif", REPO / f"image-{NAME}.sqsh", log, work)
    for path in (REPO / f"image-{NAME}.sif", REPO / f"image-{NAME}.sqsh",
                 REPO / f"build/dockerfile-{NAME}.sif"):
        path.unlink(missing_ok=True)
    shutil.rmtree(work, ignore_errors=True)


def test_what_does_not_carry_over_is_named_one_line_each(built):
    lines = [ln for ln in built.log.splitlines() if "not carried over" in ln]
    assert [ln.split(": ")[1].split()[0] for ln in lines] == ["USER", "EXPOSE"], built.log
    assert all(ln.startswith("Dockerfile:") for ln in lines)


def test_run_is_docker_run(built):
    """CMD runs under the base image's ENTRYPOINT (its banner first), in WORKDIR, with the ENV
    (the build argument's value, a value with a blank); arguments replace CMD."""
    out = run("apptainer", "run", str(built.image))
    assert out.splitlines()[0] == BANNER, out
    got = report(out)
    assert got == {"cwd": "/opt/app", "argv": ["--from-cmd"], "hello": "hello from greet",
                   "message": "overridden", "spaced": "two words",
                   "artifact": "built-by-builder"}, got
    out = run("apptainer", "run", str(built.image), "python3", "program.py", "a b", "$(x)")
    assert out.splitlines()[0] == BANNER and report(out)["argv"] == ["a b", "$(x)"], out


def test_the_builder_artifact_is_there_and_its_steps_are_not(built):
    out = run("apptainer", "exec", str(built.image), "sh", "-c",
              "cat /opt/app/artifact.txt /opt/app/torch-version.txt; ls -d /src /out "
              "/.dockerfile 2>&1 || true")
    lines = out.splitlines()
    assert lines[0] == "built-by-builder" and lines[1].startswith("2."), out
    assert all("No such file" in ln for ln in lines[2:]) and len(lines) == 5, out


def test_the_launcher_layer_is_on_top(built):
    run("apptainer", "exec", str(built.image), "torchrun_jsc", "--help")
    labels = run("apptainer", "inspect", "--labels", str(built.image))
    assert f"dockerfile:{built.work}/proj/Dockerfile" in labels, labels
    assert "org.torchrun-jsc.launcher-version" in labels, labels
    run("apptainer", "test", str(built.image), timeout=600)


def test_enroot_sees_the_environment(built):
    env = run("unsquashfs", "-cat", str(built.sqsh), "etc/environment").splitlines()
    assert {"APP_HOME=/opt/app", "MESSAGE_AT_BUILD=overridden"} <= set(env), env
    assert not any(line.startswith("SPACED=") for line in env), env  # Apptainer only


def test_a_two_node_job_runs_in_the_image(cluster, shared_tmp, built):
    spec = shared_tmp / "dockerfile-job.yaml"
    spec.write_text(SPEC.format(image=built.image))
    job = spec.with_suffix(".job")
    p = subprocess.run([PY, "-m", "launcher", "render", str(spec), "-o", str(job)],
                       capture_output=True, text=True, timeout=60, cwd=REPO, check=False)
    assert p.returncode == 0, p.stdout + p.stderr
    res = cluster.run_job(str(job), ["-o", str(shared_tmp / "dockerfile-%j.out")], timeout=300,
                          cwd=str(REPO))
    assert res.state == "COMPLETED", res.output
    got = report(res.output)
    assert (got["world_size"], got["sum"], got["hosts"]) == (4, 10.0, ["jwb0001", "jwb0002"]), got
    assert got["messages"] == ["overridden"] and got["argv"] == ["--job"], got
    assert BANNER not in res.output  # the kit runs its command, never the image's entrypoint
