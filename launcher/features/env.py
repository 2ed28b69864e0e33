"""Feature env: the ``env`` section of a spec: exported values, path edits and pass-through
names, and their lines in the batch script.

Where it sits: spec (launcher.spec reads the section with :func:`load`) -> **env** -> the
plan's env paragraph -> text. Values are exported literally, so a ``$`` in them is refused:
it almost always means a variable the user expected the shell to expand (``PATH:
/opt/bin:$PATH`` would make every later command "not found"). ``$$`` stands for a literal
``$``; ``env.prepend``/``env.append`` are the explicit form for extending PATH-like
variables at run time. A name the site also sets is settled in launcher.features.site
``check_site_env``, which the loader calls once both are read.
"""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

from launcher import shell
from launcher.features.base import Context, Feature
from launcher.model import Env, JobSpec
from launcher.runtimes import ContainerRuntime
from launcher.shell import Assign, PathExport, Raw, Statement
from launcher.yamlread import Key, Reader, key_names

KEYS = (
    Key(('env.set',),
        'mapping NAME -> string',
        'exported literally, quoted. `$` is never expanded, so a lone `$` is refused (`PATH: '
        '/opt/bin:$PATH` would make every later command "not found"); write `$$` for a literal '
        '`$`, and use `env.prepend`/`env.append` to extend a variable. `PATH`, `LD_PRELOAD` and '
        '`LD_LIBRARY_PATH` are set for the program only, where each task starts, not for the '
        "script's own srun/scontrol; Slurm's variables (`SLURM_*`, `SRUN_*`) and the shell's "
        '(`IFS`, `BASH_ENV`, `SHELLOPTS`, ...) are refused'),
    Key(('env.prepend', 'env.append',),
        'mapping NAME -> list of entries (or one string)',
        'extend a PATH-like variable at run time: `env.prepend: {PATH: [/opt/bin]}` renders '
        '`export PATH="/opt/bin${PATH:+:${PATH}}"`; entries are joined with `:` before (prepend) '
        'or after (append) the value the variable has when the script runs, which is kept if set '
        'and non-empty. Entries are literal (quoted; `:` and a lone `$` refused, `$$` = `$`); '
        'applied after `env.set`. They act where `env.set` does: in the batch script, inherited by'
        ' the tasks (see [runtimes](../guide/runtimes.md) for containers)'),
    Key(('env.pass',),
        'list of names or prefixes (`NCCL_*`)',
        'passed through from the submit environment by name; values are never written into the '
        'script (use this for secrets and proxies)'),
)
PathEdits = Tuple[Tuple[str, Tuple[str, ...]], ...]
# Names the batch script's own commands (srun, scontrol, the kit's node code) run with: set
# by env.set, they would replace what those commands need (PATH=/opt/bin: "srun: command not
# found"; LD_PRELOAD in every srun). So they go to the program only: exported under a carrier
# name (TASK_PREFIX + NAME, listed in TASK_ENV) that the task's prelude
# (launcher/task/hook.sh) sets under the real name where the task starts, after its command
# was found. env.prepend/append of them stay at batch scope: they only add entries.
TASK_ONLY = ("LD_LIBRARY_PATH", "LD_PRELOAD", "PATH")
TASK_ENV, TASK_PREFIX = "TORCHRUN_JSC_TASK_ENV", "TORCHRUN_JSC_TASK_"
# The shell's own control variables: they change how bash reads or runs every later line of
# the script (IFS splits words, BASH_ENV and ENV run a file in every bash it starts,
# SHELLOPTS/BASHOPTS switch options, CDPATH/GLOBIGNORE change cd and globs).
SHELL_CONTROL = ("BASHOPTS", "BASH_ENV", "CDPATH", "ENV", "GLOBIGNORE", "IFS",
                 "POSIXLY_CORRECT", "SHELLOPTS")
# Slurm's: set by Slurm for the job, read by the script and by srun (SLURM_JOB_NUM_NODES, and
# srun's input variables SLURM_* and SRUN_*).
SLURM_PREFIXES = ("SLURM_", "SLURMD_", "SRUN_")


def load(r: Reader, value: Any) -> Env:
    """Validate the ``env`` mapping into an Env."""
    m = r.mapping("env", value, key_names(KEYS, "env"))
    values = _names(r, "env.set", m.get("set", {}), "NAME: value")
    pairs = load_values(r, "env.set", values)
    prepend = _path_edits(r, "env.prepend", m.get("prepend", {}))
    append = _path_edits(r, "env.append", m.get("append", {}))
    names = r.strings("env.pass", m.get("pass", []))
    exported = set(values) | {n for n, _ in prepend + append}
    for name in sorted(set(values) & set(TASK_ONLY) & {n for n, _ in prepend + append}):
        raise r.fail(f"env.set.{name}", "is set for the program, which replaces its value: "
                     "write the entries of env.prepend/env.append into it, or drop env.set")
    for i, name in enumerate(names):
        if not shell.is_name(name.rstrip("*")) or name.count("*") > 1:
            raise r.fail(f"env.pass[{i}]", "must be a variable name or a prefix ending "
                         "in '*', e.g. NCCL_*", name)
        if name in exported:
            raise r.fail(f"env.pass[{i}]", "is also set in env.set, env.prepend or "
                         "env.append; keep one", name)
    return Env(values=pairs, passthrough=tuple(sorted(set(names))),
               prepend=prepend, append=append)


def load_values(r: Reader, path: str, value: Any) -> Tuple[Tuple[str, str], ...]:
    """A mapping NAME: value exported literally (env.set, site.env), sorted."""
    pairs = [(name, _literal(r, f"{path}.{name}", item, "to extend a variable at run time "
                             f"use env.prepend: {{{name}: [DIR]}} (or env.append)"))
             for name, item in _names(r, path, value, "NAME: value").items()]
    return tuple(sorted(pairs))


def _names(r: Reader, path: str, value: Any, form: str) -> Dict[str, Any]:
    if not isinstance(value, dict):
        raise r.fail(path, f"must be a mapping of {form}", value)
    for name in value:
        if not isinstance(name, str) or not shell.is_name(name):
            raise r.fail(path, "keys must be environment variable names", name)
        if name.startswith(SLURM_PREFIXES):
            raise r.fail(f"{path}.{name}", "is Slurm's: Slurm sets it for the job and the "
                         "script and srun read it; set the job's shape with job.* keys and "
                         "read the value in your program")
        if name in SHELL_CONTROL or name.startswith(TASK_PREFIX):
            raise r.fail(f"{path}.{name}", "controls how the job's own script runs (the "
                         f"shell's {', '.join(SHELL_CONTROL)}; the kit's {TASK_PREFIX}*): "
                         "set it in your program if it needs it")
    return value


def _literal(r: Reader, path: str, value: Any, hint: str) -> str:
    """A value exported as written: '$$' is a literal '$', a lone '$' is refused."""
    text = r.string(path, value, empty=True)
    if "$" in text.replace("$$", ""):
        raise r.fail(path, f"values are exported literally and '$' is never expanded; {hint}, "
                     "for a literal '$' write '$$'", text)
    return text.replace("$$", "$")


def _path_edits(r: Reader, path: str, value: Any) -> PathEdits:
    out = []
    for name, items in _names(r, path, value, "NAME: [entries]").items():
        where = f"{path}.{name}"
        if isinstance(items, (str, int)) and not isinstance(items, bool):
            items = [items]  # one entry may be written without the list
        entries = tuple(_entry(r, f"{where}[{i}]", item)
                        for i, item in enumerate(r.strings(where, items, newline=False)))
        if not entries:
            raise r.fail(where, "must list at least one entry", [])
        out.append((name, entries))
    return tuple(sorted(out))


def _entry(r: Reader, path: str, value: str) -> str:
    if ":" in value:
        raise r.fail(path, "entries are joined with ':'; list them separately", value)
    return _literal(r, path, value, "write the directory itself")


def env_lines(spec: JobSpec, runtime: ContainerRuntime) -> List[Statement]:
    task = [(name, value) for name, value in spec.env.values if name in TASK_ONLY]
    out: List[Statement] = [Assign(name, value, export=True) for name, value in spec.env.values
                            if name not in TASK_ONLY]
    if task:
        names = " ".join(n for n, _ in task)
        out.append(Raw(f"# {names}: for the program only, set where each task starts "
                       "(task/hook.sh), not for this script's own commands"))
        out += [Assign(TASK_PREFIX + name, value, export=True) for name, value in task]
        out.append(Assign(TASK_ENV, names, export=True))
    prepend, append = dict(spec.env.prepend), dict(spec.env.append)
    out += [PathExport(name, prepend.get(name, ()), append.get(name, ()))
            for name in sorted(set(prepend) | set(append))]
    if spec.env.passthrough:
        how = "inherited by every task" if runtime.inherits_env else \
            "forwarded by name into the container"
        out.append(Raw(f"# Passed through from the submit environment, {how}\n"
                       f"# (values are never written here): {' '.join(spec.env.passthrough)}"))
    return out



class EnvFeature(Feature):
    name = "env"
    sections = ("env",)
    keys = KEYS

    def exports(self, spec: JobSpec, purpose: str) -> Tuple[str, ...]:
        """What the spec sets (a program-only name: its carrier), and the names env.pass
        passes (prefixes: forwards)."""
        task = [n for n, _ in spec.env.values if n in TASK_ONLY]
        edited = {n for n, _ in spec.env.prepend + spec.env.append}
        names = [n for n in spec.env.names if n not in task or n in edited]
        names += [TASK_PREFIX + n for n in task] + ([TASK_ENV] if task else [])
        return tuple(names) + tuple(n for n in spec.env.passthrough if "*" not in n)

    def forwards(self, spec: JobSpec, purpose: str) -> Tuple[str, ...]:
        return tuple(n for n in spec.env.passthrough if "*" in n)

    def environment(self, ctx: Context) -> List[Statement]:
        return env_lines(ctx.spec, ctx.runtime)


ENV = EnvFeature()

__all__ = ["ENV", "SHELL_CONTROL", "SLURM_PREFIXES", "TASK_ENV", "TASK_ONLY", "TASK_PREFIX",
           "env_lines", "load", "load_values"]
