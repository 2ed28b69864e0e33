"""The ``site`` section of a spec: profile, modules, venv, site variables and how the venv
is built on a compute node (``site.venv_build``, used by ``jsc-compose venv``).

Where it sits: **spec** (called by launcher.spec) -> jobscript / venvjob text. Nothing here
touches the machine; every mistake is one SpecError line.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import replace
from typing import Any, List, Optional

from launcher.model import SITE_PROFILES, Env, Horovod, JobSpec, Site, VenvBuild
from launcher.modes import mode_for
from launcher.spec_env import load_values
from launcher.spec_values import anchored, expandable, literal
from launcher.yamlread import Reader

_SITE = ("profile", "hostname_suffix", "socket_ifname", "modules", "module_purge", "venv", "env",
         "venv_build")
_BUILD = ("requirements", "pip_options", "horovod")
_HOROVOD = ("nccl_home", "package")
_IFNAME = re.compile(r"[A-Za-z0-9_.,:=^-]+\Z")
_SUFFIX = re.compile(r"[A-Za-z0-9.-]*\Z")


def load_site(r: Reader, value: Any) -> Site:
    """Validate ``site`` (a profile name or a mapping) into a Site."""
    if isinstance(value, str):
        value = {"profile": value}
    m = r.mapping("site", value, _SITE)
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
    m = r.mapping("site.venv_build", value, _BUILD)
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
    m = r.mapping("site.venv_build.horovod", value, _HOROVOD, required=("nccl_home",))
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


def site_warnings(spec: JobSpec) -> List[str]:
    """Valid specs the site's documented facts say will likely fail: one line each (`check`,
    `submit`). JSC's default MPI is ParaStation MPI; the mpirun modes run the host's mpirun
    with Open MPI's options (--map-by ppr:N:node --bind-to none --tag-output)."""
    launch = spec.launch
    if spec.site.profile != "jsc" or not mode_for(launch.mode).via_mpirun(spec) or \
            any("openmpi" in m.lower() for m in spec.site.modules):
        return []
    return [f"{spec.source}: site.modules: warning: mode {launch.mode} runs the host's mpirun "
            "with Open MPI options, but JSC's default MPI is ParaStation MPI: load an Open MPI "
            "module in site.modules (`module spider OpenMPI` lists them; for Horovod its major "
            "version must match the image's Open MPI)"]
