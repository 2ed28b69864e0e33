"""The ``runtime`` section of a spec: container kind, image, binds and per-kind options.

Where it sits: **spec** (called by launcher.spec) -> runtimes -> jobscript text. Image
references are checked by their form only (nothing here looks at the machine): each
runtime is refused the images it cannot use, with the form it takes instead.
"""

from __future__ import annotations

import re
from typing import Any, Optional, Tuple, cast

from launcher.enroot import placeholder_problem
from launcher.model import RUNTIME_KINDS, Bind, Runtime, RuntimeKind
from launcher.spec_values import anchored, expandable, literal
from launcher.yamlread import Reader

_RUNTIME = {
    "bare": ("kind",),
    "apptainer": ("kind", "image", "binds", "bind_cwd", "nv", "cache_dir"),
    "enroot": ("kind", "image", "binds", "bind_cwd", "container_name", "data_path", "writable",
               "keep_old"),
    "pyxis": ("kind", "image", "binds", "bind_cwd", "container_name", "keep_old"),
}
_CONTAINER_NAME = re.compile(r"[A-Za-z0-9_.-]+\Z")
_SCHEME = re.compile(r"([a-z][a-z0-9+.-]*)://")
# Enroot's and pyxis' registry form [USER@][REGISTRY#]IMAGE[:TAG]: '#' ends the registry.
_HASH_REF = re.compile(r"([^/@#\s]+@)?[^/#\s]+#[^#\s]+\Z")
# A first path component that names a registry host (has a '.' or ':', or is localhost).
_REGISTRY_SLASH = re.compile(r"([^/@#\s]+@)?([^/#\s]*[.:][^/#\s]*|localhost)/")
_SQUASHFS = (".sqsh", ".squashfs")
_APPTAINER_SCHEMES = ("docker", "library", "oras", "shub", "http", "https")
_PYXIS_SCHEMES = ("docker", "dockerd", "podman")


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
            bad = ":," if kind == "apptainer" else ":, \t\n\r"
            if any(c in text for c in bad):
                raise r.fail(f"{path}.{end}", f"{kind} cannot express a path containing "
                             f"{' or '.join(repr(c) for c in bad if c in text)}", text)
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
    kind = r.choice("runtime.kind", value.get("kind"), RUNTIME_KINDS)
    m = r.mapping("runtime", value, _RUNTIME[kind],
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
        problem = {"apptainer": _apptainer_problem, "enroot": _enroot_problem,
                   "pyxis": _pyxis_problem}[kind](image)
        if problem:
            raise r.fail("runtime.image", problem, image)
    return image


def _apptainer_problem(image: str) -> Optional[str]:
    scheme = _SCHEME.match(image)
    if scheme and scheme[1] not in _APPTAINER_SCHEMES:
        return (f"apptainer cannot run {scheme[1]}:// images; it takes a .sif file, a "
                "sandbox directory, a squashfs file or docker://, library://, oras://, "
                "shub://, http(s):// references")
    if _HASH_REF.match(image[scheme.end():] if scheme else image):
        return ("'#' separates the registry only for Enroot/pyxis; apptainer takes "
                "docker://REGISTRY/IMAGE[:TAG], e.g. docker://nvcr.io/nvidia/pytorch:24.01")
    slash = _REGISTRY_SLASH.match(image)
    if not scheme and slash and not image.endswith((".sif", *_SQUASHFS)) \
            and not image.startswith(("/", "./", "../", "$", "~")):
        return (f"apptainer would read this registry reference as a file path; pull it on "
                f"the login node (apptainer pull image.sif docker://{image}) and name the "
                ".sif file")
    return None


def _enroot_problem(image: str) -> Optional[str]:
    if _SCHEME.match(image) or _HASH_REF.match(image):
        return ("the enroot runtime creates its container from a local squashfs file "
                "(enroot create); import it first (enroot import -o image.sqsh "
                "'docker://REGISTRY#IMAGE') or use kind: pyxis for registry images")
    if not image.endswith(_SQUASHFS):
        what = "cannot read SIF images" if image.endswith(".sif") else "reads squashfs only"
        return (f"enroot create {what}: the image must be a squashfs file ending in .sqsh or "
                ".squashfs (make enroot-image, or enroot import)")
    return None


def _pyxis_problem(image: str) -> Optional[str]:
    scheme = _SCHEME.match(image)
    if scheme and scheme[1] not in _PYXIS_SCHEMES:
        return (f"pyxis cannot import {scheme[1]}:// images; it takes "
                "[USER@][REGISTRY#]IMAGE[:TAG] (docker://, dockerd://, podman:// allowed) or a "
                "squashfs file")
    if image.endswith(".sif"):
        return "pyxis cannot run SIF images; use a squashfs file (.sqsh) or a registry image"
    ref = image[scheme.end():] if scheme else image
    slash = _REGISTRY_SLASH.match(ref)
    if slash and "#" not in ref and not image.endswith(_SQUASHFS) \
            and not image.startswith(("/", "./", "../")):
        fixed = image.replace(slash[2] + "/", slash[2] + "#", 1)
        return (f"pyxis separates the registry with '#': write {fixed} (as written, "
                f"{slash[2]} would be taken as a Docker Hub user)")
    return None
