"""Load and validate a YAML job spec into a frozen JobSpec (launcher.model).

Where it sits: **spec** (load) -> the job plan (launcher.plan) -> text -> submit. Everything a
user can get wrong is caught here, before anything is rendered, and reported as one SpecError
line: ``FILE: yaml.path: message, got 'value'``. Nothing here touches the machine.

This module reads the spec's own frame (the job's allocation, the launch's mode, processes
and port, the program) and hands every other key to its owner: the ``site`` and ``env``
sections to their features, the ``runtime`` section to launcher.runtimes, a mode's launch
keys to the mode, and a feature's job and launch keys (``job.requeue``, ``launch.preflight``,
``launch.hang_timeout``) to the feature, in the order of launcher.features.FEATURES. The keys
each mapping accepts are collected from those owners, so a key is declared where it is read.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Optional, Tuple

from launcher import runtimes
from launcher.runtimes import RUNTIME_KEYS
from launcher.features import FEATURES, env as env_feature, site as site_feature
from launcher.model import Job, JobSpec, Launch, Site, SpecError
from launcher.modes import MODE_NAMES, MODES, mode_for
from launcher.modes.base import modes_phrase
from launcher.node.image_arch import ARCHES, normalize_arch
from launcher.slurm import MAX_NODES
from launcher.yamlload import MAX_SPEC_BYTES
from launcher.yamlread import Key, Reader, expandable, key_names, load_yaml

# The frame's own keys, declared once (launcher.yamlread.Key: the reference's rows).
JOB_KEYS = (
    Key(('job.name',),
        'string, spec file name',
        '`#SBATCH --job-name`, quoted the way sbatch parses it; no `/` or `\\` while an output '
        'pattern uses `%x` (Slurm pastes the name into file names)'),
    Key(('job.nodes',),
        'int >= 1, required',
        '`#SBATCH --nodes`: the only place the node count is written; the script reads '
        '`$SLURM_JOB_NUM_NODES`'),
    Key(('job.time',),
        'Slurm time (`30`, `00:30:00`, `1-12:00:00`)',
        '`--time`'),
    Key(('job.partition', 'job.account',),
        'string',
        '`--partition`, `--account` (override at submit: `sbatch -p P -A A`)'),
    Key(('job.cpus_per_task',),
        'int, unset = whole nodes',
        '`--cpus-per-task` of the Slurm task: in `torchrun`/`mpirun_torchrun` mode that task is '
        'the per-node agent, so this is the CPUs for all its workers together (`check` warns when '
        'it is smaller than `procs_per_node`). Unset: `#SBATCH --exclusive` (whole nodes, what JSC'
        ' allocates anyway) unless `job.sbatch.exclusive` is given; see [CPU '
        'placement](../guide/launch-modes.md#cpu-placement)'),
    Key(('job.gpus_per_node',),
        'int, 0',
        '`--gpus-per-node`; default for `launch.procs_per_node`; turns on apptainer `--nv`'),
    Key(('job.output', 'job.error',),
        '`%x-%j.out` / unset',
        'batch log (`#SBATCH --output/--error`). Its directory must exist when the job starts, '
        'else Slurm fails the job without any log: `check`, `submit` and `render -o` refuse a '
        'missing one, relative to the current directory (where `sbatch` runs) or to '
        '`job.sbatch.chdir`; a directory part with `%` patterns is only known at run time and is '
        'not checked (`check` says so); `submit -- -o/-e/-D ...` leaves it to sbatch. `render` to '
        'stdout looks at nothing. `$VAR` is refused in these and all other #SBATCH/srun option '
        'values (Slurm never expands it); `%j`, `%x`, ... work'),
    Key(('job.node_output',),
        '`logs/%x-%j.node%n.out`, `null` to disable',
        'per-node logs of srun-started tasks (`srun --output`); the script creates the directory, '
        'which may not contain `%` patterns, and prints the names with `%x`/`%j` filled in '
        '(`per-node logs: logs/ddp-4242.nodeN.out (N = node index 0..1)`). mpirun modes use '
        '`--tag-output` into the batch log instead'),
    Key(('job.sbatch',),
        'mapping option -> value',
        'extra `#SBATCH` lines: `true` writes a flag, `false` leaves the option out, a string or '
        'integer is its value, e.g. `{exclusive: true, mem: 0}`; options the composer writes '
        '(nodes, time, ...) are refused with the key to use'),
    Key(('job.arch',),
        '`aarch64` or `x86_64`, unset',
        "the partition's CPU architecture (JUPITER Booster and JEDI: `aarch64`). Renders nothing; "
        '`check --image` refuses an image built for another one in one line (and, unset, warns '
        "when the image's differs from the checking host's)"),
)
LAUNCH_KEYS = (
    Key(('launch.mode',),
        '`torchrun`',
        '`torchrun`, `srun`, `horovod`, `mpirun_torchrun`, `accelerate`, `deepspeed`, `ray` '
        '([launch modes](../guide/launch-modes.md))'),
    Key(('launch.procs_per_node',),
        '`gpus_per_node` or 1',
        'processes (torchrun) or tasks/ranks per node'),
    Key(('launch.rdzv_port',),
        'derived',
        'fixed rendezvous/master port; default `29500 + SLURM_JOB_ID % 1000`, or the next port up '
        'that nothing on the first node listens on yet ([ports on shared '
        'nodes](../guide/launch-modes.md#ports-on-shared-nodes))'),
)
PROGRAM_KEY = Key(('program',),
    'list of strings (ints allowed)',
    'the argv, exactly as it reaches the program')
_TOP = ("job", *(s for f in FEATURES for s in f.sections), "runtime", "launch", "program")
# Every key a spec may hold, by section in _TOP's order, in each the frame's first, then the
# features' (in FEATURES order), the runtimes' and the modes' (in the registry's order; a key
# that several modes take once): docs/reference/spec.md's tables are these rows (`make
# spec-reference`).
KEYS: Tuple[Key, ...] = tuple(sorted(
    (*JOB_KEYS, *LAUNCH_KEYS, PROGRAM_KEY, *(k for f in FEATURES for k in f.keys),
     *RUNTIME_KEYS, *dict.fromkeys(k for m in MODES.values() for k in m.keys.values())),
    key=lambda k: _TOP.index(k.paths[0].split(".")[0])))
_FEATURE_KEYS = tuple(k for f in FEATURES for k in f.keys)
_JOB = key_names(JOB_KEYS + _FEATURE_KEYS, "job")
_LAUNCH_COMMON = key_names(LAUNCH_KEYS + _FEATURE_KEYS, "launch")
# Every other launch key belongs to the modes that name it in LaunchMode.keys.
_LAUNCH = _LAUNCH_COMMON + tuple(sorted({k for m in MODES.values() for k in m.keys}))
# Options the composer writes itself; setting them in job.sbatch would contradict it.
_MANAGED = {"nodes": "job.nodes", "N": "job.nodes", "job-name": "job.name", "J": "job.name",
            "ntasks": "launch.mode", "ntasks-per-node": "launch.mode",
            "gpus-per-node": "job.gpus_per_node", "gres": "job.gpus_per_node",
            "output": "job.output", "o": "job.output", "error": "job.error", "e": "job.error",
            "time": "job.time", "t": "job.time", "partition": "job.partition",
            "p": "job.partition", "account": "job.account", "A": "job.account",
            "cpus-per-task": "job.cpus_per_task", "c": "job.cpus_per_task"}
_TIME = re.compile(r"(\d+-)?\d+(:\d+){0,2}\Z")
_OPTION = re.compile(r"[a-z][a-z0-9-]*\Z")


def parse_spec(text: str, file: str) -> JobSpec:
    """Validate YAML text (named ``file`` in messages) into a JobSpec."""
    data = load_yaml(text, file)
    r = Reader(file)
    top = r.mapping("", data if data is not None else {}, _TOP, required=("job", "program"))
    job = _load_job(r, top["job"], Path(file).stem)
    site = site_feature.load(r, top.get("site", "generic"))  # before launch: its defaults
    launch = _load_launch(r, top.get("launch", {}), job, site)
    program = tuple(expandable(r, f"program[{i}]", arg) for i, arg in
                    enumerate(r.strings("program", top["program"], empty=True)))  # "" is valid
    if not program or not program[0]:
        raise r.fail("program", "must name a command, e.g. [python3, train.py]",
                     list(program))
    env = env_feature.load(r, top.get("env", {}))
    site = site_feature.check_site_env(r, site, env)  # a name both set: settled there
    spec = JobSpec(source=file, job=job, site=site, env=env,
                   runtime=runtimes.load(r, top.get("runtime", {"kind": "bare"})),
                   launch=launch, program=program)
    mode_for(launch.mode).check(spec)  # what the mode cannot run (with this runtime, ...)
    return spec


def load_spec(path: str) -> JobSpec:
    """Read and validate a spec file; every failure is a SpecError naming the file."""
    try:
        with open(path, "rb") as handle:  # at most one byte past the bound: never all of
            data = handle.read(MAX_SPEC_BYTES + 1)  # /dev/zero or a wrong, huge file
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise SpecError(path, "", f"cannot read spec: {reason}") from None
    return parse_spec(text, path)


def _load_job(r: Reader, value: Any, default_name: str) -> Job:
    m = r.mapping("job", value, _JOB, required=("nodes",))
    s = lambda key: r.opt_string(f"job.{key}", m.get(key), newline=False)  # noqa: E731
    for key in ("time", "partition", "account", "output", "error", "node_output"):
        _no_dollar(r, f"job.{key}", m.get(key))
    time = s("time")
    if time is not None and not _TIME.match(time):
        raise r.fail("job.time", "must be a Slurm time: minutes (90), M:S, H:M:S (24:00:00), "
                     "D-H, D-H:M or D-H:M:S (1-12:00:00)", m["time"])
    cpus = m.get("cpus_per_task")
    node_output = m.get("node_output", Job.node_output)
    name = s("name") or default_name
    if "name" not in m and any(c in name for c in "\n\r"):
        raise r.fail("job.name", "is unset, and the default, the spec file's name, holds a "
                     "newline (#SBATCH lines cannot): set job.name", name)
    # Slurm pastes the name into file names: '/' names a missing directory, and srun
    # fails its IO setup ("could not connect IO") on a backslash.
    if any(c in name for c in "/\\") and any("%x" in str(m.get(k, getattr(Job, k)) or "")
                                            for k in ("output", "error", "node_output")):
        raise r.fail("job.name", "must not contain '/' or '\\' while an output file pattern "
                     "uses %x", name)
    sbatch, sbatch_off = _load_sbatch(r, m.get("sbatch", {}))
    arch = s("arch")
    if arch is not None and arch not in ARCHES:
        near = normalize_arch(arch)
        hint = f" (did you mean {near!r}? the kernel's name, as uname -m prints it)" if near else ""
        raise r.fail("job.arch", "the partition's CPU architecture: aarch64 (JUPITER Booster, "
                     f"GH200) or x86_64{hint}", arch)
    job = Job(
        name=name,
        nodes=r.integer("job.nodes", m["nodes"], 1, MAX_NODES),
        time=time, partition=s("partition"), account=s("account"),
        cpus_per_task=None if cpus is None else r.integer("job.cpus_per_task", cpus, 1, 4096),
        gpus_per_node=r.integer("job.gpus_per_node", m.get("gpus_per_node", 0), 0, 64),
        output=r.string("job.output", m.get("output", Job.output), newline=False),
        error=s("error"),
        node_output=None if node_output is None else _node_output(r, node_output),
        sbatch=sbatch, sbatch_off=sbatch_off,
        arch=arch,
    )
    for feature in FEATURES:  # job.requeue
        job = feature.load_job(r, m, job)
    return job


def _no_dollar(r: Reader, path: str, value: Any) -> None:
    # The classic hand-written bug: sbatch and srun never expand variables in options.
    if isinstance(value, str) and "$" in value:
        raise r.fail(path, "sbatch/srun do not expand variables here; write the value "
                     "(Slurm's own %-patterns like %j and %x do work)", value)


def _node_output(r: Reader, value: Any) -> str:
    text = r.string("job.node_output", value, newline=False)
    if "%" in text.rpartition("/")[0]:
        raise r.fail("job.node_output", "the directory part cannot hold %-patterns (the script "
                     "creates it before Slurm expands them)", text)
    return text


def _load_sbatch(r: Reader, value: Any
                 ) -> Tuple[Tuple[Tuple[str, Optional[str]], ...], Tuple[str, ...]]:
    """(options to write, options switched off with false)."""
    if not isinstance(value, dict):
        raise r.fail("job.sbatch", "must be a mapping of sbatch option to value", value)
    out, off = [], []
    for key, item in value.items():
        path = f"job.sbatch.{key}"
        if not isinstance(key, str) or not _OPTION.match(key):
            raise r.fail("job.sbatch", "option names are long sbatch options without "
                         "dashes, e.g. exclusive or mem", key)
        if key in _MANAGED:
            raise r.fail(path, f"is written by the composer; set {_MANAGED[key]} instead")
        if item is False:
            off.append(key)  # not written; also keeps the composer from adding it
            continue
        if item is True:
            out.append((key, None))
        elif isinstance(item, (str, int)):
            _no_dollar(r, path, item)
            out.append((key, r.string(path, item, newline=False)))
        else:
            raise r.fail(path, "must be true (a flag), false (left out), a string or an "
                         "integer", item)
    return tuple(sorted(out)), tuple(sorted(off))


def _load_launch(r: Reader, value: Any, job: Job, site: Site) -> Launch:
    m = r.mapping("launch", value, _LAUNCH)
    name = r.choice("launch.mode", m.get("mode", "torchrun"), MODE_NAMES)
    mode = mode_for(name)
    for key in m:
        if key not in _LAUNCH_COMMON and key not in mode.keys:
            owners = [o.name for o in MODES.values() if key in o.keys]
            why = MODES[owners[0]].keys[key].why.format(modes=modes_phrase(owners))
            raise r.fail(f"launch.{key}", f"means nothing in mode {name!r}: {why}", m[key])
    port = m.get("rdzv_port")
    launch = Launch(
        mode=name,
        procs_per_node=r.integer("launch.procs_per_node",
                                 m.get("procs_per_node", job.gpus_per_node or 1), 1, 1024),
        command=_command(r, m["command"]) if "command" in m else mode.default_command,
        rdzv_port=None if port is None else r.integer("launch.rdzv_port", port, 1, 65535),
        options=mode.options(r, m, site),
    )
    for feature in FEATURES:  # launch.preflight, launch.hang_timeout
        launch = feature.load_launch(r, m, job, launch, mode)
    return launch


def _command(r: Reader, value: Any) -> Tuple[str, ...]:
    # One word, or argv as a list: a string with spaces would reach the shell as one
    # quoted word ('torchrun --foo': command not found), so it is refused.
    if isinstance(value, list):
        argv = r.strings("launch.command", value, newline=False)
        for i, item in enumerate(argv):
            expandable(r, f"launch.command[{i}]", item)
        if not argv:
            raise r.fail("launch.command", "must name the launcher, e.g. torchrun_jsc", [])
        return argv
    text = expandable(r, "launch.command", r.string("launch.command", value, newline=False))
    if any(c.isspace() for c in text):
        raise r.fail("launch.command", "must be one word or a list of words (argv), e.g. "
                     "[torchrun, --log-dir=logs]", text)
    return (text,)
