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
        '`$`, and use `env.prepend`/`env.append` to extend a variable'),
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


def load(r: Reader, value: Any) -> Env:
    """Validate the ``env`` mapping into an Env."""
    m = r.mapping("env", value, key_names(KEYS, "env"))
    values = _names(r, "env.set", m.get("set", {}), "NAME: value")
    pairs = load_values(r, "env.set", values)
    prepend = _path_edits(r, "env.prepend", m.get("prepend", {}))
    append = _path_edits(r, "env.append", m.get("append", {}))
    names = r.strings("env.pass", m.get("pass", []))
    exported = set(values) | {n for n, _ in prepend + append}
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
    out: List[Statement] = [Assign(name, value, export=True) for name, value in spec.env.values]
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
        """What the spec sets, and the names env.pass passes (prefixes: forwards)."""
        return spec.env.names + tuple(n for n in spec.env.passthrough if "*" not in n)

    def forwards(self, spec: JobSpec, purpose: str) -> Tuple[str, ...]:
        return tuple(n for n in spec.env.passthrough if "*" in n)

    def environment(self, ctx: Context) -> List[Statement]:
        return env_lines(ctx.spec, ctx.runtime)


ENV = EnvFeature()

__all__ = ["ENV", "env_lines", "load", "load_values"]
