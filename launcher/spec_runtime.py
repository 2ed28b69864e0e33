"""The ``runtime`` section of a spec: container kind, image, binds and per-kind options.

Where it sits: **spec** (called by launcher.spec) -> runtimes -> jobscript text. Image
references are checked by their form only (nothing here looks at the machine): each
runtime (launcher/runtimes/) says which keys, image forms and bind paths it takes; this
module reads the mapping and asks it.
"""

from __future__ import annotations

import re
from typing import Any, Optional, Tuple, cast

from launcher.model import Bind, Runtime, RuntimeKind
from launcher.runtimes import RUNTIMES
from launcher.runtimes.enroot_scripts import placeholder_problem
from launcher.spec_values import anchored, expandable, literal
from launcher.yamlread import Reader

_CONTAINER_NAME = re.compile(r"[A-Za-z0-9_.-]+\Z")


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


def load_runtime(r: Reader, value: Any) -> Runtime:
    """Validate the ``runtime`` mapping (or a bare kind name) into a Runtime."""
    if isinstance(value, str):
        value = {"kind": value}
    if not isinstance(value, dict):
        raise r.fail("runtime", "must be a mapping with a kind", value)
    kind = r.choice("runtime.kind", value.get("kind"), tuple(RUNTIMES))
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
    )


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

