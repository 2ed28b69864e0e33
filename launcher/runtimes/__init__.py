"""Container runtimes, one module each; this registry is the only list of them.

Adding a runtime: write launcher/runtimes/NAME.py with a ``ContainerRuntime`` subclass
(launcher/runtimes/base.py says what it owns), add it to ``RUNTIMES`` below and NAME to
launcher.model.RuntimeKind, and add its tests and a checked-in job (docs/development/index.md).
Nothing else names runtimes: the spec loader (which reads the ``runtime`` section with
:func:`load`, asking the runtime its keys, image forms and bind rule), the modes, the doctor
and submitit ask the runtime object.
"""

from __future__ import annotations

import re
from typing import Any, Dict, Optional, Sequence, Tuple, Type, cast

from launcher.model import Bind, JobSpec, Runtime, RuntimeKind
from launcher.runtimes.apptainer import Apptainer
from launcher.runtimes.bare import Bare
from launcher.runtimes.base import RUNTIME_KEYS, SCHEME, SQUASHFS, ContainerRuntime, node_srun
from launcher.runtimes.enroot import Enroot
from launcher.runtimes.enroot_scripts import placeholder_problem
from launcher.runtimes.pyxis import Pyxis
from launcher.shell import Token
from launcher.yamlread import Reader, anchored, expandable, key_names

RUNTIMES: Dict[str, Type[ContainerRuntime]] = {r.kind: r for r in (Bare, Apptainer, Enroot,
                                                                     Pyxis)}


def runtime_for(spec: JobSpec, prelude: Sequence[Token] = (), exports: Sequence[str] = (),
                forwards: Sequence[str] = ()) -> ContainerRuntime:
    """The runtime object the spec names, with what the job plan hands it (launcher.plan):
    the ``prelude`` every task of the launch starts through, the names the job ``exports``
    to the tasks and those it ``forwards`` (ContainerRuntime)."""
    return RUNTIMES[spec.runtime.kind](spec, prelude=tuple(prelude), exports=tuple(exports),
                                       forwards=tuple(forwards))


# Why runtime.stage is refused for a kind (apptainer takes it).
NO_STAGE = {
    "bare": "the bare runtime has no image to stage",
}
_CONTAINER_NAME = re.compile(r"[A-Za-z0-9_.-]+\Z")


def _load_binds(r: Reader, value: Any, kind: str) -> Tuple[Bind, ...]:
    if not isinstance(value, list):
        raise r.fail("runtime.binds", "must be a list of {source, target, read_only}", value)
    binds = []
    for i, item in enumerate(value):
        path = f"runtime.binds[{i}]"
        if isinstance(item, str):
            item = {"source": item}
        m = r.mapping(path, item, key_names(RUNTIME_KEYS, "runtime.binds[]"),
                      required=("source",))
        ends = {}
        for end in ("source", "target"):
            text = expandable(r, f"{path}.{end}", r.string(f"{path}.{end}",
                                                             m.get(end, m["source"])))
            if not anchored(text):
                raise r.fail(f"{path}.{end}", f"{end} path must be absolute (or start with "
                             "$VAR or ~, expanded on the node)", text)
            rule = RUNTIMES[kind].bind_rule
            bad = rule.found(text) if rule is not None else []
            if bad:
                raise r.fail(f"{path}.{end}", f"{kind} cannot express a path containing "
                             f"{' or '.join(bad)}", text)
            ends[end] = text
        binds.append(Bind(ends["source"], ends["target"],
                          r.boolean(f"{path}.read_only", m.get("read_only", False))))
    return tuple(binds)


def load(r: Reader, value: Any) -> Runtime:
    """Validate the ``runtime`` mapping (or a bare kind name) into a Runtime."""
    if isinstance(value, str):
        value = {"kind": value}
    if not isinstance(value, dict):
        raise r.fail("runtime", "must be a mapping with a kind", value)
    kind = r.choice("runtime.kind", value.get("kind"), tuple(RUNTIMES))
    if "stage" in value and kind in NO_STAGE:
        raise r.fail("runtime.stage", NO_STAGE[kind], value["stage"])
    m = r.mapping("runtime", value, RUNTIMES[kind].keys,
                  required=("image",) if kind != "bare" else ())
    nv = m.get("nv", "auto")
    name = m.get("container_name")
    data_path = r.opt_string("runtime.data_path", m.get("data_path"), newline=False)
    if data_path is not None and not data_path.startswith("/"):
        raise r.fail("runtime.data_path", "must be an absolute node-local path", data_path)
    if data_path is not None and placeholder_problem(data_path):
        raise r.fail("runtime.data_path", placeholder_problem(data_path), data_path)
    return Runtime(
        kind=cast(RuntimeKind, kind),
        image=_image(r, kind, m.get("image")),
        binds=_load_binds(r, m.get("binds", []), kind),
        bind_cwd=r.boolean("runtime.bind_cwd", m.get("bind_cwd", True)),
        nv=None if nv == "auto" else r.boolean("runtime.nv", nv),
        cache_dir=_cache_dir(r, m.get("cache_dir")),
        container_name=None if name is None else r.matching(
            "runtime.container_name", name, _CONTAINER_NAME, "letters, digits, '_', '.' or '-'"),
        data_path=data_path,
        writable=r.boolean("runtime.writable", m.get("writable", False)),
        keep_old=r.integer("runtime.keep_old", m.get("keep_old", 1), 0, 100),
        stage=_stage(r, m.get("stage", False), m.get("image"), kind),
    )


def _stage(r: Reader, value: Any, image: Any, kind: str) -> Optional[str]:
    """runtime.stage: false, true (to /tmp) or {to: DIR}: the node-local directory, or None."""
    if value is False:
        return None
    if value is True:
        value = {}
    if not isinstance(value, dict):
        raise r.fail("runtime.stage", "must be true, false or {to: DIR} (a node-local "
                     "directory, /tmp by default)", value)
    m = r.mapping("runtime.stage", value, key_names(RUNTIME_KEYS, "runtime.stage"))
    to = expandable(r, "runtime.stage.to", r.string("runtime.stage.to", m.get("to", "/tmp"),
                                                    newline=False))
    if not to.startswith(("/", "$")):
        raise r.fail("runtime.stage.to", "must be an absolute node-local directory (or start "
                     "with $VAR, expanded on the batch host)", to)
    if isinstance(image, str) and kind == "pyxis" and not image.endswith(SQUASHFS):
        raise r.fail("runtime.stage", "copies an image file, but pyxis imports this registry "
                     f"image itself ({image}): import it once (enroot import -o image.sqsh "
                     "...) and name the .sqsh file")
    if isinstance(image, str) and SCHEME.match(image):
        raise r.fail("runtime.stage", "copies an image file, but runtime.image is pulled from "
                     f"a registry ({image}): pull it once on the login node (apptainer pull "
                     "image.sif ...) and name the .sif file")
    return to


def _cache_dir(r: Reader, value: Any) -> Optional[str]:
    text = r.opt_string("runtime.cache_dir", value, newline=False)
    return None if text is None else expandable(r, "runtime.cache_dir", text)


def _image(r: Reader, kind: str, value: Any) -> Optional[str]:
    image = r.opt_string("runtime.image", value, newline=False)
    if image is not None:
        expandable(r, "runtime.image", image)
        problem = RUNTIMES[kind].image_problem(image)
        if problem:
            raise r.fail("runtime.image", problem, image)
    return image



__all__ = ["RUNTIMES", "RUNTIME_KEYS", "ContainerRuntime", "load", "node_srun", "runtime_for"]
