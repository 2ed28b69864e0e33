"""Instructions -> build stages: the ARGs before the first FROM, each FROM's base (a registry
image, a stage before it, a local SIF or archive the user named, or scratch), and the stages
the final one needs (as BuildKit builds them: the others are left out).

Where it sits: between ``lexer`` and ``render`` in ``launcher.dockerfile``. spython merges the
stages of a multi-stage file (tests/unit/test_dockerfile.py pins how), so the file is split
here, at FROM, before spython sees any of it.

A stage FROM an earlier stage (``FROM builder AS final``) is that stage's instructions followed
by its own: Apptainer's stages bootstrap from images only, so the earlier stage's steps run
again in this one (Docker reuses its result; the image is the same, the build takes longer).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Tuple

from launcher.dockerfile.lexer import DockerfileError, Instruction, plain, read_instructions, \
    words

# What BuildKit defines without an ARG default (for FROM and for stages that declare them).
PLATFORM_ARGS = ("TARGETPLATFORM", "TARGETOS", "TARGETARCH", "TARGETVARIANT",
                 "BUILDPLATFORM", "BUILDOS", "BUILDARCH", "BUILDVARIANT")
LOCAL_KINDS = ("localimage", "docker-archive", "oci-archive")


@dataclass(frozen=True)
class Base:
    """An Apptainer bootstrap: ``docker`` (a registry image), ``localimage`` (a SIF),
    ``docker-archive``/``oci-archive`` (a saved image), or ``scratch``."""

    bootstrap: str
    source: str


@dataclass(frozen=True)
class Stage:
    """One Apptainer stage. ``inherited`` counts the leading instructions that came from
    the stage it is FROM (run again here); ``implicit`` marks an image named only by
    ``COPY --from=IMAGE`` (a stage with no steps)."""

    name: str
    base: Base
    instructions: Tuple[Instruction, ...]
    line: int
    inherited: int = 0
    implicit: bool = False
    needs: Tuple[str, ...] = ()
    sources: Tuple[Tuple[int, str], ...] = ()  # COPY --from's line -> the stage it names


@dataclass(frozen=True)
class Build:
    """The stages to build, in order (the last is the image), the global ARG values, the
    notes to print (one line each), and the build arguments nothing declared."""

    stages: Tuple[Stage, ...]
    global_args: Mapping[str, str]
    notes: Tuple[str, ...] = ()
    unused_args: Tuple[str, ...] = ()
    build_args: Mapping[str, str] = field(default_factory=dict)


def platform_values(arch: str) -> Dict[str, str]:
    """BuildKit's automatic platform ARGs for a Debian architecture name (amd64, arm64)."""
    arch, variant = (arch, "v8") if arch == "arm64" else (arch, "")
    plat = f"linux/{arch}" + (f"/{variant}" if variant else "")
    values = {}
    for side in ("TARGET", "BUILD"):
        values.update({f"{side}PLATFORM": plat, f"{side}OS": "linux", f"{side}ARCH": arch,
                       f"{side}VARIANT": variant})
    return values


def local_base(value: str, what: str) -> Base:
    """``--from-local NAME=VALUE``'s VALUE: ``PATH.sif`` (or localimage:PATH),
    docker-archive:PATH (docker save) or oci-archive:PATH (skopeo copy)."""
    kind, sep, path = value.partition(":")
    if sep and kind in LOCAL_KINDS and path:
        return Base(kind, path)
    if value.endswith(".sif"):
        return Base("localimage", value)
    raise DockerfileError(f"{what}: expected PATH.sif, localimage:PATH, docker-archive:PATH or "
                          f"oci-archive:PATH, got {value!r}")


def plan_build(text: str, build_args: Mapping[str, str], from_local: Mapping[str, str],
               arch: str = "amd64", source: str = "Dockerfile") -> Build:
    """The stages of ``text`` to build, with the ARGs and local bases applied."""
    instructions = read_instructions(text, source)
    global_args: Dict[str, str] = {}
    notes: List[str] = []
    platform = platform_values(arch)
    declared: List[str] = []
    raw: List[Tuple[Instruction, List[Instruction]]] = []
    for ins in instructions:
        if ins.keyword == "FROM":
            raw.append((ins, []))
        elif not raw:
            if ins.keyword != "ARG":
                raise DockerfileError(f"{ins.where(source)}: before the first FROM only ARG "
                                      "may stand")
            for name, value in arg_values(ins, {**platform, **global_args}, build_args, source):
                declared.append(name)
                if value is not None:
                    global_args[name] = value
        else:
            raw[-1][1].append(ins)
    if not raw:
        raise DockerfileError(f"{source}: no FROM instruction: not a Dockerfile")
    stages: Dict[str, Stage] = {}
    order: List[str] = []
    for index, (ins, body) in enumerate(raw):
        base_ref, alias = _from_words(ins, {**platform, **global_args}, source)
        if ins.flag("platform") is not None:
            notes.append(f"{ins.where(source)} --platform={ins.flag('platform')}: ignored, the "
                         "image is built for ARCH (make image ARCH=...)")
        name = _stage_name(alias, index, stages)
        parent = stages.get(base_ref.lower())
        if parent is not None:
            stage = Stage(name, parent.base, parent.instructions + tuple(body), ins.line,
                          inherited=len(parent.instructions), needs=parent.needs,
                          sources=parent.sources)
        else:
            stage = Stage(name, _base(base_ref, from_local, ins.where(source)), tuple(body),
                          ins.line)
        needs, sources = list(stage.needs), list(stage.sources)
        for copy in (b for b in body if b.keyword in ("COPY", "ADD") and b.flag("from")):
            ref = plain(words(copy.flag("from") or "", {**global_args})[0], copy.where(source))
            dep = _copy_source(ref, stages, order, index, copy.where(source))
            if dep is None:
                dep = f"image-{copy.line}"
                stages[dep] = Stage(dep, _base(ref, from_local, copy.where(source)), (),
                                    copy.line, implicit=True)
                order.append(dep)
            needs.append(dep)
            sources.append((copy.line, dep))
        stage = Stage(stage.name, stage.base, stage.instructions, stage.line, stage.inherited,
                      needs=tuple(dict.fromkeys(needs)), sources=tuple(sources))
        stages[name] = stage
        if alias:
            stages[alias.lower()] = stage
        order.append(name)
    final = stages[order[-1]]
    wanted = _needed(final, stages)
    kept = tuple(stages[n] for n in order if n in wanted)
    used = set(declared) | _stage_args(kept)
    unused = tuple(sorted(k for k in build_args if k not in used))
    return Build(kept, dict(global_args), tuple(notes), unused, dict(build_args))


def arg_values(ins: Instruction, values: Mapping[str, str], build_args: Mapping[str, str],
               source: str) -> List[Tuple[str, Optional[str]]]:
    """An ARG's names and values: the --build-arg, else the default, else None (unset)."""
    out: List[Tuple[str, Optional[str]]] = []
    for word in words(ins.text, values):
        head = "".join(s for s in word if isinstance(s, str))
        name = head.split("=", 1)[0]
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise DockerfileError(f"{ins.where(source)}: not a variable name: {name!r}")
        default: Optional[str] = None
        if isinstance(word[0], str) and "=" in word[0]:
            first = word[0].split("=", 1)[1]
            default = plain([first, *word[1:]], f"{ins.where(source)} {name}")
        out.append((name, build_args.get(name, default)))
    return out


def _from_words(ins: Instruction, values: Mapping[str, str], source: str) -> Tuple[str, str]:
    try:
        parts = [plain(w, ins.where(source)) for w in words(ins.text, values)]
    except DockerfileError as exc:
        if str(exc).startswith(f"{source}:"):
            raise
        raise DockerfileError(f"{ins.where(source)}: {exc}") from None
    if len(parts) == 1:
        return parts[0], ""
    if len(parts) == 3 and parts[1].lower() == "as":
        return parts[0], parts[2]
    raise DockerfileError(f"{ins.where(source)}: expected FROM IMAGE [AS NAME], got "
                          f"{ins.text!r}")


def _stage_name(alias: str, index: int, stages: Mapping[str, Stage]) -> str:
    if alias:
        if alias.lower() in stages:
            raise DockerfileError(f"stage name {alias!r} is used twice")
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", alias):
            raise DockerfileError(f"stage name {alias!r}: letters, digits, '_', '.', '-'")
        return alias
    return f"stage-{index}"


def _base(ref: str, from_local: Mapping[str, str], what: str) -> Base:
    if ref in from_local:
        return local_base(from_local[ref], f"--from-local {ref}")
    if ref == "scratch":
        return Base("scratch", "")
    if "://" in ref:
        raise DockerfileError(f"{what}: {ref}: a FROM names an image without a scheme "
                              "(give a local SIF or archive with --from-local NAME=PATH)")
    return Base("docker", ref)


def _copy_source(ref: str, stages: Mapping[str, Stage], order: List[str],
                 index: int, where: str) -> Optional[str]:
    """The stage a COPY --from names (its name or its number), or None for an image."""
    if ref.isdigit():
        number = int(ref)
        named = [n for n in order if not stages[n].implicit]
        if number >= index:
            raise DockerfileError(f"{where} --from={ref}: no stage {ref} before this one")
        return named[number]
    stage = stages.get(ref.lower())
    return stage.name if stage is not None else None


def _needed(final: Stage, stages: Mapping[str, Stage]) -> set:
    wanted, todo = set(), [final.name]
    while todo:
        name = todo.pop()
        if name not in wanted:
            wanted.add(name)
            todo.extend(stages[name].needs)
    return wanted


def _stage_args(stages: Tuple[Stage, ...]) -> set:
    names = set()
    for stage in stages:
        for ins in stage.instructions:
            if ins.keyword == "ARG":
                names.update(w.split("=", 1)[0] for w in ins.text.split())
    return names
