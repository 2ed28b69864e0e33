"""Feature site: where the job runs and how its nodes meet. The ``site`` section (profile,
modules, venv, site variables, the inter-node names, how ``jsc-compose venv`` builds the venv)
and the rendezvous: the first node's inter-node name and the port.

Where it sits: spec (launcher.spec reads the section with :func:`load`) -> **site** ->
the plan's site paragraph (``environment``) and the rendezvous lines (``geometry``) -> text.

The rendezvous host is the first node + the site's suffix: fixed (``site.hostname_suffix``),
chosen on the first node when the job starts by the profile's rule (model.SuffixRule;
``site: jsc``: the suffix listed for ``$SYSTEMNAME``, else the first candidate whose name
resolves there), or, where the site gives no name (model.FastInterface; ``generic``), the
first node's fast interface's address where its name resolves to another network
(launcher/node/net/fast.py). The lookup (``getent hosts``) runs in the job, never here; the
modes take the suffix from launcher.modes.common.suffix_token, the preview the endpoint from
:func:`preview_endpoint`.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import replace
from typing import Any, List, Optional, Tuple

from launcher.features.base import Context, Feature
from launcher.features.env import load_values
from launcher.model import SITE_PROFILES, Env, FastInterface, Horovod, JobSpec, Site, \
    SuffixRule, VenvBuild
from launcher.modes import LaunchMode
from launcher.modes.common import suffix_token
from launcher.shell import Assign, Raw, Statement, Var, expansion, expansion_names, join, \
    quote, require_vars, word
from launcher.slurm import rdzv_port_lines
from launcher.yamlread import Key, Reader, anchored, expandable, key_names, literal

KEYS = (
    Key(('site',),
        '`jsc`, `cray-ex`, `generic` (default) or a mapping',
        'site profile, see above'),
    Key(('site.profile',),
        '`jsc`, `cray-ex` or `generic` (default)',
        'the profile the other `site.*` keys start from'),
    Key(('site.hostname_suffix',),
        "profile's",
        "appended to the first node's name for the rendezvous endpoint, as written (no lookup); it"
        " replaces `jsc`'s per-system rule and `generic`'s fast-interface rule, e.g. "
        "`hostname_suffix: i` or `''` for the plain name"),
    Key(('site.socket_ifname',),
        'unset',
        "exported as `GLOO_SOCKET_IFNAME` and `NCCL_SOCKET_IFNAME` (a single name in NCCL's exact "
        'form `=NAME`; NCCL matches a plain name as a prefix); under `generic` the only interfaces'
        ' the rendezvous rule counts as fast'),
    Key(('site.modules',),
        'list',
        '`module load ...` before anything else'),
    Key(('site.module_purge',),
        'bool; `true` under `jsc`, else `false`',
        '`module purge` right before `module load` (only when `site.modules` is set), so the job '
        'runs with exactly those modules (as `jsc-compose venv` builds the venv)'),
    Key(('site.venv',),
        'path',
        '`source VENV/bin/activate` (relative to the submit directory); warns (one stderr line, '
        'the job goes on) when `VENV/.jsc-modules`, written by `jsc-compose venv`, lists other '
        'modules than `site.modules`'),
    Key(('site.env',),
        "mapping NAME -> string; the profile's defaults",
        'site variables exported by every job, e.g. `{NCCL_IB_GID_INDEX: "3"}` for RoCE; literal '
        "like `env.set`; a name also in `env` is refused. The profile's defaults (`jsc`: "
        '`NCCL_IB_TIMEOUT`, `NCCL_IB_RETRY_CNT`, `UCX_RC_TIMEOUT`) are written `export '
        'NAME="${NAME:-value}"` after the modules; a name given here, or in '
        '`env.set`/`env.prepend`/`env.append`, replaces its default; under `env.pass` the submit '
        "environment's value wins when it has one"),
    Key(('site.venv_build',),
        'mapping',
        'how `jsc-compose venv` builds `site.venv` on a compute node (the three keys below)'),
    Key(('site.venv_build.requirements',),
        'path, `requirements.txt` beside the spec',
        '`jsc-compose venv`: `pip install -r` this (relative to the submit directory; '
        '`--requirements` overrides)'),
    Key(('site.venv_build.pip_options',),
        'list of strings',
        '`jsc-compose venv`: pip install options, e.g. `[--no-index, --find-links, /p/wheels]`; '
        '`--pip-option=OPT` adds more'),
    Key(('site.venv_build.horovod',),
        '`{nccl_home: ABS_PATH, package: "horovod[pytorch]"}`',
        '`jsc-compose venv`: then builds Horovod with `HOROVOD_NCCL_HOME`, '
        "`HOROVOD_GPU_OPERATIONS=NCCL`, no build isolation (it compiles against the venv's torch)"),
    Key(('site.venv_build.horovod.nccl_home',),
        'absolute path, required',
        "the site's NCCL (`HOROVOD_NCCL_HOME`), e.g. `$EBROOTNCCL` written out"),
    Key(('site.venv_build.horovod.package',),
        '`horovod[pytorch]`',
        'the pip requirement that builds Horovod'),
)
_IFNAME = re.compile(r"[A-Za-z0-9_.,:=^-]+\Z")
_SUFFIX = re.compile(r"[A-Za-z0-9.-]*\Z")


def load(r: Reader, value: Any) -> Site:
    """Validate ``site`` (a profile name or a mapping) into a Site."""
    if isinstance(value, str):
        value = {"profile": value}
    m = r.mapping("site", value, key_names(KEYS, "site"))
    name = r.choice("site.profile", m.get("profile", "generic"), sorted(SITE_PROFILES))
    base = SITE_PROFILES[name]
    ifname = m.get("socket_ifname", base.socket_ifname)
    modules = m.get("modules")
    purge = m.get("module_purge", base.module_purge)
    if not isinstance(purge, bool):
        raise r.fail("site.module_purge", "must be true or false", purge)
    env = load_values(r, "site.env", m["env"]) if "env" in m else ()
    # The profile's values are defaults: a name in the spec's site.env replaces its default.
    defaults = tuple((n, v) for n, v in base.env if n not in dict(env))
    return Site(
        profile=name,
        hostname_suffix=_suffix(r, m["hostname_suffix"]) if "hostname_suffix" in m
        else base.hostname_suffix,
        socket_ifname=None if ifname is None else r.matching(
            "site.socket_ifname", ifname, _IFNAME, "an interface name or NCCL-style list"),
        modules=base.modules if modules is None else r.strings("site.modules", modules,
                                                                newline=False),
        venv=_venv(r, m.get("venv", base.venv)),
        env=tuple(sorted(env + defaults)),
        venv_build=_venv_build(r, m.get("venv_build", {})),
        env_defaults=tuple(n for n, _ in defaults if n in base.env_defaults),
        module_purge=purge,
        mpi_plugin=base.mpi_plugin,
    )


def _suffix(r: Reader, value: Any) -> str:
    """The spec's own suffix: fixed, so it replaces a profile's run-time rule (jsc's)."""
    return value if value == "" else r.matching(
        "site.hostname_suffix", value, _SUFFIX, "letters, digits, '.' or '-'")


def _venv(r: Reader, value: Any) -> Optional[str]:
    text = r.opt_string("site.venv", value, newline=False)
    if text is not None:
        expandable(r, "site.venv", text)
    if text is not None and posixpath.basename(posixpath.normpath(text)) in ("", ".", ".."):
        raise r.fail("site.venv", "must name the venv directory itself, e.g. .venv", text)
    return text


def _venv_build(r: Reader, value: Any) -> VenvBuild:
    m = r.mapping("site.venv_build", value, key_names(KEYS, "site.venv_build"))
    horovod = m.get("horovod")
    literal(r, "site.venv_build.requirements", m.get("requirements"))
    options = r.strings("site.venv_build.pip_options", m.get("pip_options", []), newline=False)
    for i, option in enumerate(options):
        expandable(r, f"site.venv_build.pip_options[{i}]", option)
    return VenvBuild(
        requirements=r.opt_string("site.venv_build.requirements", m.get("requirements"),
                                  newline=False),
        pip_options=options,
        horovod=None if horovod is None else _horovod(r, horovod),
    )


def _horovod(r: Reader, value: Any) -> Horovod:
    m = r.mapping("site.venv_build.horovod", value, key_names(KEYS, "site.venv_build.horovod"),
                  required=("nccl_home",))
    home = expandable(r, "site.venv_build.horovod.nccl_home",
                      r.string("site.venv_build.horovod.nccl_home", m["nccl_home"],
                               newline=False))
    if not anchored(home):
        raise r.fail("site.venv_build.horovod.nccl_home", "must be an absolute path or start "
                     "with a variable (the site's NCCL, e.g. $EBROOTNCCL)", home)
    return Horovod(nccl_home=home, package=r.string("site.venv_build.horovod.package",
                                                    m.get("package", Horovod.package),
                                                    newline=False))


def check_site_env(r: Reader, site: Site, env: Env) -> Site:
    """A name in site.env may not also be set or passed by the env section: keep one. The
    profile's defaults give way instead: to env.set/prepend/append (the spec's value), and to
    env.pass (the submit environment's value, when it has one). Returns the site to use."""
    taken = set(env.names) | set(env.passthrough)
    for name, _ in site.env:
        if name in taken and name not in site.env_defaults:
            raise r.fail(f"site.env.{name}", "is also set in env.set, env.prepend, env.append "
                         "or env.pass; keep one")
    dropped = set(env.names) & set(site.env_defaults)
    if not dropped:
        return site
    return replace(site, env=tuple(p for p in site.env if p[0] not in dropped),
                   env_defaults=tuple(n for n in site.env_defaults if n not in dropped))


_SYSTEM = re.compile(r"[A-Za-z0-9_.-]+\Z")

# host_suffix = the first SUFFIX with which NODE's name resolves (glibc's resolver, which
# torch and the kit's net rule use too); otherwise one line naming every name tried, status 1.
# Outside the job's nodes (no SLURMD_NODENAME: salloc's shell on a login node, where the
# doctor runs inside an allocation) the names may resolve only on the nodes: there the first
# SUFFIX is taken, and one line says that it could not be checked.


def host_lines(site: Site) -> List[Statement]:
    """Batch scope, after $first_node: set $rdzv_host, the first node's inter-node name."""
    if isinstance(site.hostname_suffix, FastInterface):
        args = " " + quote(site.socket_ifname) if site.socket_ifname else ""
        return [Raw(f"# Site profile {site.profile}: the first node's name, or its fast "
                    "interface's address where the name is on another network."),
                Raw(f'jsc_endpoint "$first_node"{args}')]
    return [*suffix_lines(site),
            Assign("rdzv_host", word(Var("first_node"), suffix_token(site)))]


def _words(rule: SuffixRule) -> Tuple[List[Tuple[str, str]], str]:
    """(case patterns and their arrays, the array for any other SYSTEMNAME), quoted."""
    def array(suffixes: Tuple[str, ...]) -> str:
        return "host_suffixes=(" + " ".join(quote(s) for s in suffixes) + ")"
    rows = []
    for systems, suffix in rule.groups:
        for name in systems:
            if not _SYSTEM.match(name):
                raise ValueError(f"site rule: not a SYSTEMNAME: {name!r}")
        rows.append(("|".join(quote(n) for n in systems), array((suffix,))))
    return rows, array(rule.candidates)


def suffix_lines(site: Site) -> List[Statement]:
    """Batch scope, after $first_node: set $host_suffix by the site's rule, or stop the job
    in one line. Nothing for a fixed suffix."""
    rule = site.hostname_suffix
    if not isinstance(rule, SuffixRule):
        return []
    rows, other = _words(rule)
    case = ['case "${SYSTEMNAME:-}" in'] + [f"    {p}) {a} ;;" for p, a in rows] + \
        [f"    *) {other} ;;", "esac"]
    return [Raw(f"# Site profile {site.profile}: the suffix listed for $SYSTEMNAME, else the "
                "first candidate that resolves."),
            Raw("\n".join(case)),
            Raw('jsc_pick_host_suffix "$first_node" "${host_suffixes[@]}" || exit 1')]


def preview_endpoint(site: Site, first: str, port: int, job_id: int,
                     system: Optional[str]) -> Tuple[Optional[str], List[str]]:
    """(the rendezvous host for the node lines, or None where only the job can tell; the
    preview's endpoint lines). ``system``: the SYSTEMNAME to show (None: every system's)."""
    rule = site.hostname_suffix
    if isinstance(rule, FastInterface):
        fast = f"site.socket_ifname {site.socket_ifname}" if site.socket_ifname else \
            "InfiniBand (IPoIB) or Slingshot hsn*"
        return None, [
            f"# rendezvous endpoint ${{rdzv_host}}:{port}, rdzv_id {job_id}: chosen on the "
            f"first node when the job starts (site profile {site.profile}):",
            f"#   {first}:{port} where {first} resolves to an address on its fast interface "
            f"({fast}) or it has none;",
            "#   else that interface's address (the job says which in one line; "
            "site.hostname_suffix fixes the name)"]
    if not isinstance(rule, SuffixRule):
        host = first + rule
        return host, [f"# rendezvous endpoint {host}:{port} (first node + site suffix "
                      f"{rule!r}), rdzv_id {job_id}"]
    listed = dict(rule.systems)
    if system in listed:
        host = first + listed[system]
        return host, [f"# rendezvous endpoint {host}:{port} (first node + {listed[system]!r} "
                      f"for SYSTEMNAME {system}, site profile {site.profile}), rdzv_id {job_id}"]
    names = ", ".join(first + s for s in rule.candidates)
    others = f"SYSTEMNAME {system} (not listed)" if system else "SYSTEMNAME unset or another"
    return None, [
        f"# rendezvous endpoint ${{rdzv_host}}:{port}, rdzv_id {job_id}: the first node's "
        f"inter-node name, chosen when the job starts (site profile {site.profile}):",
        *(f"#   SYSTEMNAME {', '.join(systems)}: {first}{suffix}:{port}"
          for systems, suffix in rule.groups),
        f"#   {others}: the first of {names} that resolves there",
        "#   (none resolves: the job stops before launching, in one line naming them; "
        "--system NAME previews one system)"]


def expanded_names(spec: JobSpec) -> List[str]:
    """Every variable the spec's values expand at run time (docs/guide/spec-values.md), sorted."""
    rt = spec.runtime
    values = [*spec.program, rt.image or "", rt.cache_dir or "", spec.site.venv or ""]
    values += [path for b in rt.binds for path in (b.source, b.target)]
    return sorted({name for value in values for name in expansion_names(value)})


# `jsc-compose venv` (launcher.render.venvjob) records the modules it built site.venv with here.
MODULES_FILE = ".jsc-modules"


def check_lines(site: Site) -> List[Statement]:
    """Run job: warn (stderr, one line) when VENV was built with other modules than these."""
    if not site.venv:
        return []
    record = posixpath.join(site.venv, MODULES_FILE)
    # launcher/node/job.sh jsc_venv_check: the one line, where the record differs.
    return [Raw(join(["jsc_venv_check", expansion(record), "\n".join(site.modules)]))]


def site_lines(spec: JobSpec) -> List[Statement]:
    site = spec.site
    if isinstance(site.hostname_suffix, SuffixRule):
        suffix = ", nodes reach each other by their system's inter-node names (below)"
    elif isinstance(site.hostname_suffix, FastInterface):
        suffix = ", the rendezvous on the first node's fast interface (below)"
    else:
        suffix = f", nodes reach each other as <hostname>{site.hostname_suffix}" \
            if site.hostname_suffix else ""
    out: List[Statement] = [Raw(f"# Site profile {site.profile}{suffix}.")]
    names = expanded_names(spec)
    if names:
        out += [Raw("# The spec's $VARs and ~, expanded below: stop here if one is unset."),
                require_vars(names)]
    if site.venv:
        out += [Raw(f"# Built with `jsc-compose venv`? Then warn if its modules ({MODULES_FILE}) "
                    "differ.")] + check_lines(site)
    if site.modules or site.venv:
        out.append(Raw("set +u  # module and venv activation scripts are not written for set -u"))
        if site.modules:
            if site.module_purge:
                out.append(Raw("module purge  # site.module_purge: only site.modules below"))
            out.append(Raw(join(["module", "load", *site.modules])))
        if site.venv:
            out += [Raw("# shellcheck source=/dev/null"),
                    Raw(join(["source", expansion(posixpath.join(site.venv, "bin",
                                                                 "activate"))]))]
        out.append(Raw("set -u"))
    if site.socket_ifname:
        # NCCL matches a plain name as a prefix (ib0 would also take ib01): `=NAME` is exact.
        plain = site.socket_ifname[:1] not in "=^" and "," not in site.socket_ifname
        nccl = f"={site.socket_ifname}" if plain else site.socket_ifname
        out += [Assign("GLOO_SOCKET_IFNAME", site.socket_ifname.lstrip("="), export=True),
                Assign("NCCL_SOCKET_IFNAME", nccl, export=True)]
    values = [Assign(name, value, export=True) for name, value in site.env
              if name not in site.env_defaults]
    if site.env_defaults:
        line = _defaults_line([(n, v) for n, v in site.env if n in site.env_defaults])
        values.append(Raw(f"{line.text}  # site profile {site.profile}'s defaults, where the "
                          "job's environment (e.g. a module) has none"))
    return out + values


_PLAIN_DEFAULT = re.compile(r"[A-Za-z0-9._,:/+@%^-]*\Z")


def _defaults_line(pairs: List[Tuple[str, str]]) -> Raw:
    """``jsc_defaults NAME=value...`` (launcher/node/job.sh: each exported where the job's
    environment has no value). Only the built-in profiles have defaults (model
    SITE_PROFILES), and their values are plain words: anything else is a bug here."""
    for name, value in pairs:
        if not _PLAIN_DEFAULT.match(value):
            raise ValueError(f"site profile default {name}={value!r} is not a plain word")
        Var(name)  # validates the name
    return Raw(join(["jsc_defaults", *(f"{name}={value}" for name, value in pairs)]))


def rendezvous_lines(spec: JobSpec) -> List[Statement]:
    """Batch scope: rdzv_host (the first node's inter-node name) and rdzv_port; no fallback
    when the node list has no first node. The jobscript's and submitit's one preamble."""
    port = spec.launch.rdzv_port
    return [
        Raw("jsc_first_node || exit 1"),
        *host_lines(spec.site),
    ] + [Raw(line) for line in ([f"rdzv_port={port}"] if port is not None else
                                 rdzv_port_lines("rdzv_port", "rdzv_host"))]



class SiteFeature(Feature):
    name = "site"
    sections = ("site",)
    keys = KEYS

    def exports(self, spec: JobSpec, purpose: str) -> Tuple[str, ...]:
        names = [n for n, _ in spec.site.env]
        if spec.site.socket_ifname:
            names += ["GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"]
        return tuple(names)

    def environment(self, ctx: Context) -> List[Statement]:
        return site_lines(ctx.spec)

    def geometry(self, ctx: Context) -> List[Statement]:
        return rendezvous_lines(ctx.spec)

    def warnings(self, spec: JobSpec, mode: LaunchMode) -> List[str]:
        return site_warnings(spec, mode)


def site_warnings(spec: JobSpec, mode: LaunchMode) -> List[str]:
    """Valid specs the site's documented facts say will likely fail: one line each (`check`,
    `submit`). JSC's default MPI is ParaStation MPI; the mpirun modes run the host's mpirun
    with Open MPI's options (--map-by ppr:N:node --bind-to none --tag-output)."""
    launch = spec.launch
    if spec.site.profile != "jsc" or not mode.via_mpirun(spec) or \
            any("openmpi" in m.lower() for m in spec.site.modules):
        return []
    return [f"{spec.source}: site.modules: warning: mode {launch.mode} runs the host's mpirun "
            "with Open MPI options, but JSC's default MPI is ParaStation MPI: load an Open MPI "
            "module in site.modules (`module spider OpenMPI` lists them; for Horovod its major "
            "version must match the image's Open MPI)"]


SITE = SiteFeature()

__all__ = ["MODULES_FILE", "SITE", "check_lines", "check_site_env", "host_lines", "load", "preview_endpoint",
           "rendezvous_lines", "site_lines", "site_warnings", "suffix_lines"]
