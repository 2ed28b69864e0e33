"""Load and validate a YAML job spec into a frozen JobSpec (launcher.model).

Where it sits: **spec** -> runtimes/plans -> jobscript text -> submit. Everything a user can
get wrong is caught here, before anything is rendered, and reported as one SpecError line:
``FILE: yaml.path: message, got 'value'``. Nothing here touches the machine.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Optional, Tuple, cast

from launcher import shell
from launcher.model import (MODES, RUNTIME_KINDS, SITE_PROFILES, Bind, Env, Job, JobSpec,
                            Launch, Mode, MpiLauncher, Runtime, RuntimeKind, Site, SpecError)
from launcher.yamlread import Reader, load_yaml

_TOP = ("job", "site", "env", "runtime", "launch", "program")
_JOB = ("name", "nodes", "time", "partition", "account", "cpus_per_task", "gpus_per_node",
        "output", "error", "node_output", "sbatch")
_SITE = ("profile", "hostname_suffix", "socket_ifname", "modules", "venv")
_RUNTIME = {
    "bare": ("kind",),
    "apptainer": ("kind", "image", "binds", "bind_cwd", "nv", "cache_dir"),
    "enroot": ("kind", "image", "binds", "bind_cwd", "container_name", "data_path"),
    "pyxis": ("kind", "image", "binds", "bind_cwd", "container_name"),
}
_LAUNCH = ("mode", "procs_per_node", "command", "rdzv_port", "max_restarts", "mpi")
# Options the composer writes itself; setting them in job.sbatch would contradict it.
_MANAGED = {"nodes": "job.nodes", "N": "job.nodes", "job-name": "job.name", "J": "job.name",
            "ntasks": "launch.mode", "ntasks-per-node": "launch.mode",
            "gpus-per-node": "job.gpus_per_node", "gres": "job.gpus_per_node",
            "output": "job.output", "o": "job.output", "error": "job.error", "e": "job.error",
            "time": "job.time", "t": "job.time", "partition": "job.partition",
            "p": "job.partition", "account": "job.account", "A": "job.account",
            "cpus-per-task": "job.cpus_per_task", "c": "job.cpus_per_task"}
_TIME = re.compile(r"(\d+-)?\d+(:\d+){0,2}\Z")
_IFNAME = re.compile(r"[A-Za-z0-9_.,:=^-]+\Z")
_SUFFIX = re.compile(r"[A-Za-z0-9.-]*\Z")
_OPTION = re.compile(r"[a-z][a-z0-9-]*\Z")
_CONTAINER_NAME = re.compile(r"[A-Za-z0-9_.-]+\Z")


def parse_spec(text: str, file: str) -> JobSpec:
    """Validate YAML text (named ``file`` in messages) into a JobSpec."""
    data = load_yaml(text, file)
    r = Reader(file)
    top = r.mapping("", data if data is not None else {}, _TOP, required=("job", "program"))
    job = _load_job(r, top["job"], Path(file).stem)
    launch = _load_launch(r, top.get("launch", {}), job)
    program = r.strings("program", top["program"], empty=True)  # "" is a valid argument
    if not program or not program[0]:
        raise r.fail("program", "must name a command, e.g. [python3, train.py]",
                     list(program))
    return JobSpec(source=file, job=job, site=_load_site(r, top.get("site", "generic")),
                   env=_load_env(r, top.get("env", {})),
                   runtime=_load_runtime(r, top.get("runtime", {"kind": "bare"})),
                   launch=launch, program=program)


def load_spec(path: str) -> JobSpec:
    """Read and validate a spec file; every failure is a SpecError naming the file."""
    try:
        text = Path(path).read_text(encoding="utf-8")
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
        raise r.fail("job.time", "must be a Slurm time like 30, 00:30:00 or 1-12:00:00", m["time"])
    cpus = m.get("cpus_per_task")
    node_output = m.get("node_output", Job.node_output)
    name = s("name") or default_name
    # Slurm pastes the name into file names: '/' names a missing directory, and srun
    # fails its IO setup ("could not connect IO") on a backslash.
    if any(c in name for c in "/\\") and any("%x" in str(m.get(k, getattr(Job, k)) or "")
                                            for k in ("output", "error", "node_output")):
        raise r.fail("job.name", "must not contain '/' or '\\' while an output file pattern "
                     "uses %x", name)
    return Job(
        name=name,
        nodes=r.integer("job.nodes", m["nodes"], 1, 100000),
        time=time, partition=s("partition"), account=s("account"),
        cpus_per_task=None if cpus is None else r.integer("job.cpus_per_task", cpus, 1, 4096),
        gpus_per_node=r.integer("job.gpus_per_node", m.get("gpus_per_node", 0), 0, 64),
        output=r.string("job.output", m.get("output", Job.output), newline=False),
        error=s("error"),
        node_output=None if node_output is None else _node_output(r, node_output),
        sbatch=_load_sbatch(r, m.get("sbatch", {})),
    )


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


def _load_sbatch(r: Reader, value: Any) -> Tuple[Tuple[str, Optional[str]], ...]:
    if not isinstance(value, dict):
        raise r.fail("job.sbatch", "must be a mapping of sbatch option to value", value)
    out = []
    for key, item in value.items():
        path = f"job.sbatch.{key}"
        if not isinstance(key, str) or not _OPTION.match(key):
            raise r.fail("job.sbatch", "option names are long sbatch options without "
                         "dashes, e.g. exclusive or mem", key)
        if key in _MANAGED:
            raise r.fail(path, f"is written by the composer; set {_MANAGED[key]} instead")
        if item is True:
            out.append((key, None))
        else:
            _no_dollar(r, path, item)
            out.append((key, r.string(path, item, newline=False)))
    return tuple(sorted(out))


def _load_site(r: Reader, value: Any) -> Site:
    if isinstance(value, str):
        value = {"profile": value}
    m = r.mapping("site", value, _SITE)
    name = r.choice("site.profile", m.get("profile", "generic"), sorted(SITE_PROFILES))
    base = SITE_PROFILES[name]
    suffix = m.get("hostname_suffix", base.hostname_suffix)
    ifname = m.get("socket_ifname", base.socket_ifname)
    modules = m.get("modules")
    venv = m.get("venv", base.venv)
    return Site(
        profile=name,
        hostname_suffix=suffix if suffix == "" else r.matching(
            "site.hostname_suffix", suffix, _SUFFIX, "letters, digits, '.' or '-'"),
        socket_ifname=None if ifname is None else r.matching(
            "site.socket_ifname", ifname, _IFNAME, "an interface name or NCCL-style list"),
        modules=base.modules if modules is None else r.strings("site.modules", modules,
                                                                newline=False),
        venv=r.opt_string("site.venv", venv, newline=False),
    )


def _load_env(r: Reader, value: Any) -> Env:
    m = r.mapping("env", value, ("set", "pass"))
    values = m.get("set", {})
    if not isinstance(values, dict):
        raise r.fail("env.set", "must be a mapping of NAME: value", values)
    pairs = []
    for name, item in values.items():
        if not isinstance(name, str) or not shell.is_name(name):
            raise r.fail("env.set", "keys must be environment variable names", name)
        pairs.append((name, r.string(f"env.set.{name}", item, empty=True)))
    names = r.strings("env.pass", m.get("pass", []))
    for i, name in enumerate(names):
        if not shell.is_name(name.rstrip("*")) or name.count("*") > 1:
            raise r.fail(f"env.pass[{i}]", "must be a variable name or a prefix ending "
                         "in '*', e.g. NCCL_*", name)
        if name in values:
            raise r.fail(f"env.pass[{i}]", "is also set in env.set; keep one", name)
    return Env(values=tuple(sorted(pairs)), passthrough=tuple(sorted(set(names))))


def _load_binds(r: Reader, value: Any, kind: str) -> Tuple[Bind, ...]:
    if not isinstance(value, list):
        raise r.fail("runtime.binds", "must be a list of {source, target, read_only}", value)
    binds = []
    for i, item in enumerate(value):
        path = f"runtime.binds[{i}]"
        if isinstance(item, str):
            item = {"source": item}
        m = r.mapping(path, item, ("source", "target", "read_only"), required=("source",))
        ends = {}
        for end in ("source", "target"):
            text = r.string(f"{path}.{end}", m.get(end, m["source"]))
            if not text.startswith("/"):
                raise r.fail(f"{path}.{end}", f"{end} path must be absolute", text)
            bad = ":," if kind == "apptainer" else ":, \t\n\r"
            if any(c in text for c in bad):
                raise r.fail(f"{path}.{end}", f"{kind} cannot express a path containing "
                             f"{' or '.join(repr(c) for c in bad if c in text)}", text)
            ends[end] = text
        binds.append(Bind(ends["source"], ends["target"],
                          r.boolean(f"{path}.read_only", m.get("read_only", False))))
    return tuple(binds)


def _load_runtime(r: Reader, value: Any) -> Runtime:
    if isinstance(value, str):
        value = {"kind": value}
    if not isinstance(value, dict):
        raise r.fail("runtime", "must be a mapping with a kind", value)
    kind = r.choice("runtime.kind", value.get("kind"), RUNTIME_KINDS)
    m = r.mapping("runtime", value, _RUNTIME[kind],
                  required=("image",) if kind != "bare" else ())
    nv = m.get("nv", "auto")
    name = m.get("container_name")
    data_path = r.opt_string("runtime.data_path", m.get("data_path"), newline=False)
    if data_path is not None and not data_path.startswith("/"):
        raise r.fail("runtime.data_path", "must be an absolute node-local path", data_path)
    return Runtime(
        kind=cast(RuntimeKind, kind),
        image=r.opt_string("runtime.image", m.get("image"), newline=False),
        binds=_load_binds(r, m.get("binds", []), kind),
        bind_cwd=r.boolean("runtime.bind_cwd", m.get("bind_cwd", True)),
        nv=None if nv == "auto" else r.boolean("runtime.nv", nv),
        cache_dir=r.opt_string("runtime.cache_dir", m.get("cache_dir"), newline=False),
        container_name=None if name is None else r.matching(
            "runtime.container_name", name, _CONTAINER_NAME, "letters, digits, '_', '.' or '-'"),
        data_path=data_path,
    )


def _load_launch(r: Reader, value: Any, job: Job) -> Launch:
    m = r.mapping("launch", value, _LAUNCH)
    mode = r.choice("launch.mode", m.get("mode", "torchrun"), MODES)
    default_procs = job.gpus_per_node or 1
    port = m.get("rdzv_port")
    return Launch(
        mode=cast(Mode, mode),
        procs_per_node=r.integer("launch.procs_per_node",
                                 m.get("procs_per_node", default_procs), 1, 1024),
        command=r.string("launch.command", m.get("command", "torchrun_jsc"), newline=False),
        rdzv_port=None if port is None else r.integer("launch.rdzv_port", port, 1, 65535),
        max_restarts=r.integer("launch.max_restarts", m.get("max_restarts", 0), 0, 1000),
        mpi=cast(MpiLauncher, r.choice("launch.mpi", m.get("mpi", "srun"), ("srun", "mpirun"))),
    )