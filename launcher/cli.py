"""Command line edge of the composer: ``jsc-compose`` (= ``python -m launcher``)
``render|check|preview|submit|venv|doctor|stacks|timeline|dockerfile``.

Where it sits: the only place that turns typed exceptions into one stderr line and an
exit code (2: bad spec or arguments, 1: writing/submitting failed). ``--debug`` shows the
traceback instead. Nothing is written unless the whole script rendered.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import subprocess
import sys
from pathlib import Path, PurePosixPath
from typing import Optional, Sequence

from launcher import __version__, kit
from launcher.render import imagecheck
from launcher.node.doctor.report import failures, render_json, render_table
from launcher.submit.doctor import run_here, submit_and_wait
from launcher.node.image_arch import ImageArchError, image_arch, mismatch_line, normalize_arch
from launcher.render.jobscript import render, render_jobscript
from launcher.plan import build_plan, plan_json, spec_warnings
from launcher.render.preview import render_preview
from launcher.model import JobSpec, Preflight, SpecError, SubmitError
from launcher.runtimes import RUNTIMES
from launcher.slurm import nodelist_size
from launcher.spec import load_spec
from launcher.submit import check_log_dirs, sbatch, submit_warnings, write_script
from launcher.submit.output import output_target
from launcher.submit.stacks import run_stacks_step, timed_out_line
from launcher.render.venvjob import default_requirements, default_script, fill_wheelhouse, \
    render_venv_job


# The console script (pyproject.toml); ``python -m launcher`` passes its own name.
PROG = "jsc-compose"

EXAMPLES = """\
examples:
  {prog} render jobs/ddp_container.yaml            # print the jobscript (dry run)
  {prog} render jobs/ddp_container.yaml -o x.job   # write it
  {prog} render --json jobs/ddp_container.yaml     # the job plan (the dry run) as JSON
  {prog} check jobs/ddp_container.yaml             # validate only
  {prog} preview jobs/ddp_container.yaml --nodelist 'jwb[0001-0002]'
  {prog} submit jobs/ddp_container.yaml -- -A myproject   # write .job, sbatch --parsable
  {prog} venv jobs/ddp_venv.yaml --requirements req.txt   # build site.venv in a job
  {prog} doctor jobs/ddp_container.yaml [--json]  # check every node (salloc, or a short job)
  {prog} stacks 123456                            # every rank's Python stack, grouped
  {prog} timeline 123456                          # each node's start-up phases, and an SVG
  {prog} dockerfile Dockerfile -o image.def       # an Apptainer definition (make image DOCKERFILE=)"""


def _parser(prog: str = PROG) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog, epilog=EXAMPLES.format(prog=prog),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Compose Slurm jobscripts from a YAML spec (every key: "
                    "docs/reference/spec.md).\nNeeds PyYAML only, not torch.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    # Also accepted after the subcommand; SUPPRESS keeps it from resetting the global one.
    debug = argparse.ArgumentParser(add_help=False)
    debug.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                       help="show tracebacks")
    debug.add_argument("--kit", metavar="DIR", default=argparse.SUPPRESS, help=(
        "the kit's package directory (launcher/) the jobs run its node-side code from, on "
        "storage every node sees (default: this kit's; relative where it lies under the "
        "current directory)"))
    parser.add_argument("--version", action="version", version=f"launcher {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    render = sub.add_parser("render", parents=[debug], help="print or write the jobscript")
    render.add_argument("spec")
    render.add_argument("-o", "--output", help="write here (a regular file, atomically; "
                        "through a symlink) instead of stdout; '-': stdout")
    render.add_argument("--json", action="store_true", help="the job plan instead of the "
                        "script: #SBATCH options with who asked for each, the paragraphs, "
                        "the set-up step, the steps before the launch and the launch, as JSON")
    check = sub.add_parser("check", parents=[debug], help="validate the spec only")
    check.add_argument("spec")
    check.add_argument("--image", action="store_true",
                       help="also read the image's architecture (against job.arch, else "
                       "this host's) and run it here (apptainer): python3 >= 3.8, torch >= "
                       "1.9 and the commands the spec starts in it")
    preview = sub.add_parser("preview", parents=[debug], help="what each node would run")
    preview.add_argument("spec")
    preview.add_argument("--nodelist", required=True, help="e.g. 'jwb[0001-0004]'")
    preview.add_argument("--job-id", type=int, default=12345)
    preview.add_argument("--system", metavar="NAME", help=(
        "the $SYSTEMNAME whose inter-node names to show where the site profile picks them "
        "per system (site: jsc); default: this shell's $SYSTEMNAME, else every system's"))
    submit = sub.add_parser("submit", parents=[debug],
                            help="render to SPEC's .job file and run sbatch --parsable")
    submit.add_argument("spec")
    submit.add_argument("-o", "--output", help="script path (default: the spec with .job)")
    submit.usage = f"{prog} submit [-h] [-o OUTPUT] spec [-- SBATCH_OPTION ...]"
    _venv_parser(sub, debug, prog)
    _doctor_parser(sub, debug, prog)
    _dockerfile_parser(sub, debug)
    stacks = sub.add_parser("stacks", parents=[debug], help="every rank's Python stack of a "
                            "running job, grouped (docs/guide/hangs.md)",
                            description="Signal every rank of a running job that the kit "
                            "started (one srun --overlap step per node) and print their "
                            "Python stacks, ranks with the same stack grouped.")
    stacks.add_argument("jobid", nargs="?", help="default: SLURM_JOB_ID (inside the job)")
    stacks.add_argument("--json", action="store_true", help="print the ranks as JSON lines")
    stacks.add_argument("--here", action="store_true", help="this machine only, no srun (the "
                        "node you are logged in to)")
    stacks.add_argument("--wait", default="10", metavar="S",
                        help="seconds each node waits for its ranks' dumps, e.g. 0.5 "
                        "(default 10)")
    timeline = sub.add_parser("timeline", parents=[debug], help="when each node of a job "
                              "passed each phase of its start-up, and an SVG picture "
                              "(docs/guide/timeline.md)",
                              description="Read the marks a job's nodes wrote into "
                              ".timeline/JOBID/ under its submit directory (a finished job or "
                              "a running one), print one line per node and phase with the "
                              "slowest node and phase named, and write an SVG.")
    timeline.add_argument("jobid", nargs="?", help="default: SLURM_JOB_ID (inside the job)")
    timeline.add_argument("--dir", help="the job's submit directory (default: this one if the "
                          "job's marks are here, else the job's working directory as Slurm "
                          "records it)")
    timeline.add_argument("--svg", metavar="FILE", help="where the picture goes (default: "
                          ".timeline/JOBID.svg in the submit directory)")
    return parser


def _doctor_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]",
                   debug: argparse.ArgumentParser, prog: str) -> None:
    doctor = sub.add_parser("doctor", parents=[debug], help="check every node before the "
                            "launch: names, ports, network, binds, image (docs/guide/doctor.md)",
                            description="Run the checks on every node: inside an allocation "
                            "(SLURM_JOB_ID set) on its nodes, else in a short job with the "
                            "spec's geometry. Prints a node x check table. Exit status: 0 all "
                            "passed, 1 a check failed (or the job could not run), 2 bad spec.")
    doctor.add_argument("spec")
    doctor.add_argument("--json", action="store_true", help="print the reports as JSON")
    doctor.add_argument("--nodelist", metavar="NODES",
                        help="outside an allocation: these nodes (sbatch -w)")
    doctor.add_argument("--fake-gpus", action="store_true", help="the GPUs are fake GRES (the "
                        "lab): count CUDA_VISIBLE_DEVICES only, no device files")
    doctor.usage = (f"{prog} doctor [-h] [--json] [--nodelist NODES] [--fake-gpus] spec "
                    "[-- SBATCH_OPTION ...]")


def _dockerfile_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]",
                       debug: argparse.ArgumentParser) -> None:
    conv = sub.add_parser("dockerfile", parents=[debug], help="convert a Dockerfile into an "
                          "Apptainer definition (docs/guide/runtimes.md#from-a-dockerfile)",
                          description="Write an Apptainer definition that builds what the "
                          "Dockerfile builds: every stage, ARG, ENV, WORKDIR, COPY/ADD, RUN, "
                          "ENTRYPOINT and CMD; one line on stderr for each instruction that "
                          "does not carry over. Exit status 2: a Dockerfile or option that "
                          "cannot be converted (one line).")
    conv.add_argument("dockerfile")
    conv.add_argument("-o", "--output", help="write here instead of stdout")
    conv.add_argument("--build-arg", action="append", default=[], metavar="NAME=VALUE",
                      help="as docker build --build-arg (repeat it)")
    conv.add_argument("--from-local", action="append", default=[], metavar="IMAGE=SOURCE",
                      help="build FROM IMAGE (as written in the Dockerfile, ARGs applied) on "
                      "a local copy: PATH.sif, docker-archive:PATH or oci-archive:PATH")
    conv.add_argument("--context", metavar="DIR", help="the build context COPY and ADD read "
                      "from (default: the Dockerfile's directory; docker build's last argument)")
    conv.add_argument("--arch", help="amd64 or arm64, for TARGETARCH & co. (default: this "
                      "host's)")


def _pairs(values: Sequence[str], option: str) -> dict:
    out = {}
    for value in values:
        name, sep, rest = value.partition("=")
        if not sep or not name:
            raise SpecError(option, "", "expected NAME=VALUE", value)
        out[name] = rest
    return out


def _dockerfile(args: argparse.Namespace) -> int:
    """`dockerfile`: read the Dockerfile and its context, convert (launcher.dockerfile), write."""
    try:
        from launcher.dockerfile import convert
        from launcher.dockerfile.context import DiskContext
    except ImportError as exc:
        raise SubmitError(f"jsc-compose dockerfile needs spython ({exc}): pip install "
                          "spython==0.3.14, or pip install . (the kit's dependencies)") from None
    path = os.path.abspath(args.dockerfile)
    if not os.path.isfile(path):
        raise SpecError(args.dockerfile, "", "no such file: the Dockerfile to convert")
    context = os.path.abspath(args.context or os.path.dirname(path))
    if not os.path.isdir(context):
        raise SpecError("--context", "", "not a directory", args.context)
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(
        normalize_arch(args.arch or os.uname().machine) or "")
    if arch is None:
        raise SpecError("--arch", "", "amd64 or arm64 (x86_64 and aarch64 too)", args.arch)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    header = [f"Apptainer definition written by jsc-compose dockerfile (launcher {__version__})",
              f"from {args.dockerfile} (build context {context}); edit the Dockerfile, not this.",
              "Build: apptainer build IMAGE.sif THIS.def, or make image DOCKERFILE=...; notes: "
              "docs/guide/runtimes.md#from-a-dockerfile"]
    done = convert(text, DiskContext(context), source=os.path.basename(path),
                   build_args=_pairs(args.build_arg, "--build-arg"),
                   from_local=_pairs(args.from_local, "--from-local"), arch=arch, header=header)
    _warn(done.notes)
    if args.output:
        tmp = f"{args.output}.tmp.{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(done.text)
        os.replace(tmp, args.output)
    else:
        sys.stdout.write(done.text)
    return 0


def _venv_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]",
                 debug: argparse.ArgumentParser, prog: str) -> None:
    venv = sub.add_parser("venv", parents=[debug], help="build site.venv in a job on a "
                          "compute node, with site.modules (docs/guide/specs.md)")
    venv.add_argument("spec")
    venv.add_argument("--requirements", help="pip requirements file (default: "
                      "site.venv_build.requirements, else requirements.txt beside the spec)")
    venv.add_argument("--pip-option", action="append", default=[], metavar="OPT",
                      help="extra pip install option, after site.venv_build.pip_options; "
                      "repeat it, and write values with '=', e.g. --pip-option=--no-index")
    venv.add_argument("--wheelhouse", metavar="DIR",
                      help="for compute nodes without internet (JSC): download the packages here, "
                      "on the login node, into DIR (python3 -m pip download, python3 from PATH: "
                      "load the job's modules first), then build offline from DIR "
                      "(--no-index --find-links)")
    venv.add_argument("--dry-run", action="store_true", help="print the script, submit nothing")
    venv.add_argument("-o", "--output", help="script path (default: SPEC's stem + .venv.job)")
    venv.usage = (f"{prog} venv [-h] [--requirements FILE] [--pip-option=OPT ...] "
                  "[--wheelhouse DIR] [--dry-run | -o OUTPUT] spec [-- SBATCH_OPTION ...]")


def _build_venv(spec: JobSpec, args: argparse.Namespace) -> None:
    options = list(args.pip_option)
    house = os.path.abspath(args.wheelhouse) if args.wheelhouse else None
    if house:
        options = ["--no-index", f"--find-links={house}", *options]
    text = render_venv_job(spec, args.requirements, options)
    if args.dry_run:
        sys.stdout.write(text)
        return
    script = output_target(args.output or default_script(spec))  # before any download
    requirements = args.requirements or default_requirements(spec)
    if not os.path.isfile(requirements):
        raise SpecError(spec.source, "--requirements", "file not found (relative to the "
                        "submit directory, where the build job starts)", requirements)
    if house:
        fill_wheelhouse(house, requirements, spec)
    write_script(text, script)
    print(sbatch(script, args.sbatch_args))


def _check_image(spec: JobSpec, machine: str) -> str:
    """What the spec's image is and has: its architecture, read without running it (an image
    for another architecture than job.arch is refused; without job.arch, one for another
    architecture than this host, ``machine``, gets a warning line: the partition may differ
    from the login node), then, where it runs natively here, python3, torch and the commands
    the spec starts in it (launcher.render.imagecheck); one line naming what it lacks."""
    image = spec.runtime.image
    local = None if image is None else RUNTIMES[spec.runtime.kind](spec).local_exec(image, [])
    if local is None or image is None:
        raise SpecError(spec.source, "runtime.kind", "check --image runs the image here with "
                        "Apptainer: apptainer images only", spec.runtime.kind)
    if "://" not in image and not os.path.exists(image):
        raise SubmitError(f"{image}: image not found (build it with `make image`)")
    try:
        arch = image_arch(image)
    except ImageArchError as exc:
        raise SubmitError(str(exc)) from None
    if spec.job.arch and arch.arch != spec.job.arch:
        raise SubmitError(mismatch_line(image, arch, spec.job.arch, f"{spec.source}'s job.arch"))
    here = normalize_arch(machine) or machine
    where = f"arch {arch.arch} ({arch.source})"
    if arch.arch != here:
        if not spec.job.arch:
            _warn([mismatch_line(image, arch, here, f"this host ({machine})", fix=False)
                   + "; set job.arch when the partition's architecture differs from this host's"])
        return f"{where}, not run here (another architecture)"
    wanted = imagecheck.commands(spec)
    try:
        done = subprocess.run(imagecheck.probe_argv(local, wanted), capture_output=True, text=True,
                              timeout=600, check=False)
    except FileNotFoundError:
        raise SubmitError(f"{image}: check --image needs apptainer on this machine") from None
    except subprocess.TimeoutExpired:
        raise SubmitError(f"{image}: the image did not answer within 600 s") from None
    have, problems = imagecheck.verdict(done.stdout, wanted)
    if done.returncode != 0 and not have:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise SubmitError(f"{image}: cannot run it here: {last}")
    if problems:
        raise SubmitError(f"{image}: {'; '.join(problems)}: use an image that has them (any "
                          "image with python3 >= 3.8 and torch >= 1.9: the kit's own code is "
                          "bound in from the kit)")
    return f"{have}, {where}"


def _kit_dir(args: argparse.Namespace) -> str:
    """The kit path the jobscript names (launcher.kit.for_render); one line on stderr where
    the compute nodes cannot see it (launcher.kit.local_problem)."""
    given = getattr(args, "kit", None)
    path = Path(given).resolve() if given else kit.installed()
    if not (path / "node" / "job.sh").is_file():
        raise SpecError("--kit", "DIR", "not the kit's package directory (no node/job.sh in "
                        "it): name the launcher/ directory of a torchrun-jsc-kit install", given)
    problem = kit.local_problem(path, kit.mounts())
    if problem and args.command in ("check", "submit", "render", "doctor"):
        print(f"warning: {problem}", file=sys.stderr)
    return kit.for_render(Path.cwd(), path)


def _doctor(spec: JobSpec, args: argparse.Namespace, kit_dir: str) -> int:
    """Run the checks on the allocation (or a short job), print the table; 0 = all passed."""
    fake = args.fake_gpus or bool(spec.launch.preflight and spec.launch.preflight.fake_gpus)
    launch = dataclasses.replace(spec.launch, preflight=Preflight(fake_gpus=fake))
    script = render_jobscript(dataclasses.replace(spec, launch=launch), doctor=True,
                              kit_dir=kit_dir)
    if args.nodelist:
        _check_doctor_nodelist(spec, args.nodelist)
    if os.environ.get("SLURM_JOB_ID"):
        if args.sbatch_args or args.nodelist:
            raise SpecError(args.spec, "--", "inside an allocation (SLURM_JOB_ID is set) the "
                            "doctor uses its nodes; sbatch options and --nodelist mean nothing "
                            "here", " ".join(args.sbatch_args or ["--nodelist", args.nodelist]))
        reports, other = run_here(script, os.environ)
    else:
        reports, other = submit_and_wait(script, args.sbatch_args, args.nodelist)
    for line in other:
        print(line, file=sys.stderr)
    sys.stdout.write(render_json(reports) if args.json else render_table(reports))
    return 1 if failures(reports) else 0


def _check_doctor_nodelist(spec: JobSpec, text: str) -> None:
    """The doctor's --nodelist parsed here, not by sbatch, and no larger than the spec's job
    (a shorter one is filled up by Slurm: sbatch -w)."""
    want = spec.job.nodes + spec.job.spare_nodes
    try:
        size = nodelist_size(text)
    except ValueError as exc:
        raise SpecError(spec.source, "--nodelist", str(exc)) from None
    if size > want:
        raise SpecError(spec.source, "--nodelist", f"names {size} nodes, more than the spec's "
                        f"job has ({want}): name at most {want} (Slurm adds others to fewer)",
                        text)


def _stacks(args: argparse.Namespace) -> int:
    """`stacks JOBID`: collect on every node of the job (or here), print grouped. Exit 1 when
    no rank answered, or when the collection timed out (the ranks it got are printed)."""
    from launcher.node import stacks

    job = args.jobid or os.environ.get("SLURM_JOB_ID")
    if not job or not job.isdigit():
        raise SpecError("stacks", "jobid", "a numeric Slurm job id (or run it inside the job)",
                        job or "")
    wait_s = _wait_seconds(args.wait)
    late = None
    if args.here:
        records = stacks.collect(job, wait_s)
    else:
        step = run_stacks_step(job, wait_s)
        records = stacks.read_records(step.text.splitlines())
        if step.timed_out_s is not None:
            late = timed_out_line(step.timed_out_s, step.nodes, records)
    if args.json:
        for record in records:
            print(json.dumps(record, sort_keys=True))
    else:
        sys.stdout.write(stacks.report(records, job))
    if late:
        print(late, file=sys.stderr)
    return 0 if records and not late else 1


def _wait_seconds(text: str) -> float:
    """--wait as seconds, fractions kept; one line for anything but a finite number >= 0."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise SpecError("stacks", "--wait", "seconds each node waits for its ranks' dumps: a "
                        "finite number >= 0, e.g. 0.5 or 10", text)
    return value


def _sets_logs(sbatch_args: Sequence[str]) -> bool:
    """True when options for sbatch replace the spec's log files or directory."""
    return any(a.startswith(("-o", "-e", "-D", "--output", "--error", "--chdir"))
               for a in sbatch_args)


def _run(args: argparse.Namespace) -> int:
    if args.command == "stacks":
        return _stacks(args)
    if args.command == "dockerfile":
        return _dockerfile(args)
    if args.command == "timeline":
        from launcher.submit import timeline

        sys.stdout.write(timeline.run(args.jobid, args.dir, args.svg))
        return 0
    spec = load_spec(args.spec)
    for warning in spec_warnings(spec):  # the spec is valid, but likely not meant so
        print(warning, file=sys.stderr)
    target = _script_path(args)
    if target and os.path.realpath(target) == os.path.realpath(args.spec):
        raise SpecError(args.spec, "-o", "would overwrite the spec itself", target)
    if target and target != "-":
        output_target(target)  # a regular file or a new one: refused before anything runs
    kit_dir = _kit_dir(args)
    if args.command == "check":
        # Every check ran in load_spec (the modes' and runtimes' too); rendering only counts
        # the script's lines for the summary.
        text = render_jobscript(spec, kit_dir=kit_dir)
        notes = "".join(f"; {note}" for note in check_log_dirs(spec))
        _warn(submit_warnings(spec, os.environ, os.getcwd()))
        found = f", image: {_check_image(spec, os.uname().machine)}" if args.image else ""
        nodes = f"{spec.job.nodes} node{'s' if spec.job.nodes != 1 else ''}"
        print(f"{args.spec}: ok ({spec.launch.mode}, {spec.runtime.kind}, {nodes}, "
              f"{len(text.splitlines())} lines{found}{notes})")
    elif args.command == "render":
        plan = build_plan(spec, "submit", kit_dir)
        text = json.dumps(plan_json(plan), indent=2) + "\n" if args.json else render(plan)
        if args.output and args.output != "-":
            check_log_dirs(spec)  # a script to submit: its log directory must exist
            write_script(text, args.output)
        else:
            sys.stdout.write(text)
    elif args.command == "venv":
        _build_venv(spec, args)
    elif args.command == "doctor":
        return _doctor(spec, args, kit_dir)
    elif args.command == "preview":
        if not 1 <= args.job_id < 1 << 32:
            raise SpecError(args.spec, "--job-id", "a Slurm job id: an integer from 1 to "
                            f"{(1 << 32) - 1}", args.job_id)
        try:
            # Besides the cwd, the one default preview takes from this machine: on a JSC
            # login node, $SYSTEMNAME is the system the job will run on.
            system = args.system or os.environ.get("SYSTEMNAME") or None
            sys.stdout.write(render_preview(spec, args.nodelist, args.job_id, os.getcwd(),
                                            system))
        except ValueError as exc:
            raise SpecError(args.spec, "--nodelist", str(exc)) from None
    else:
        text = render_jobscript(spec, kit_dir=kit_dir)
        if not _sets_logs(args.sbatch_args):
            check_log_dirs(spec)
        script = target
        _warn(submit_warnings(spec, os.environ, os.getcwd(), submitting=True))
        write_script(text, script)
        print(sbatch(script, args.sbatch_args))
    return 0


def _script_path(args: argparse.Namespace) -> Optional[str]:
    """Where the command writes a file: render's -o (``-``: stdout), submit's -o or the spec
    beside it with .job; venv's is checked where it is known (launcher.render.venvjob)."""
    output = getattr(args, "output", None)
    if args.command == "submit":
        output = output or str(PurePosixPath(args.spec).with_suffix(".job"))
    if output == "-" and args.command in ("submit", "venv"):
        raise SpecError(args.spec, "-o", f"{args.command} hands a file to sbatch: name one "
                        "(render -o - writes to stdout)", output)
    return output


def _warn(lines: Sequence[str]) -> None:
    for line in lines:
        print(line, file=sys.stderr)


def _is_dockerfile_error(exc: Exception) -> bool:
    from launcher.dockerfile.lexer import DockerfileError

    return isinstance(exc, DockerfileError)


def main(argv: Optional[Sequence[str]] = None, prog: str = PROG) -> int:
    # Everything after the first "--" is for sbatch (submit only); options before it, in any
    # order, are ours. (argparse.REMAINDER would swallow a later "-o FILE" too.)
    argv = list(sys.argv[1:] if argv is None else argv)
    cut = argv.index("--") if "--" in argv else len(argv)
    parser = _parser(prog)
    args = parser.parse_args(argv[:cut])
    args.sbatch_args = argv[cut + 1:]
    if args.sbatch_args and args.command not in ("submit", "venv", "doctor"):
        parser.error(f"options after '--' are for sbatch and only taken by submit, venv and "
                     "doctor, "
                     f"got {' '.join(args.sbatch_args)!r}")
    try:
        return _run(args)
    except (SpecError, SubmitError, ValueError) as exc:
        if args.debug or (isinstance(exc, ValueError) and not _is_dockerfile_error(exc)):
            raise
        print(" ".join(str(exc).splitlines()), file=sys.stderr)  # one line, always
        return 1 if isinstance(exc, SubmitError) else 2
    except OSError as exc:  # stdout closed, unreadable cwd, ...
        if args.debug:
            raise
        print(f"launcher: {exc}", file=sys.stderr)
        return 1
