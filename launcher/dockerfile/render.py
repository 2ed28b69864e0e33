"""Build stages -> Apptainer definition text, with Docker's semantics kept where Apptainer
can keep them and one note line for each instruction it cannot.

Where it sits: the last, pure step of ``launcher.dockerfile`` (no disk, no environment: the
build context comes in as a ``Context``). Per stage, in the Dockerfile's order, %post gets:
ARG and ENV as exports (RUN sees them as in Docker), WORKDIR as ``mkdir -p`` + ``cd``, each
RUN in its own ``/bin/sh -c`` (or SHELL's, or the exec form's argv: a ``cd`` or a variable in
one RUN does not reach the next, as in Docker), COPY/ADD as a copy from a staging path that
%files (or ``%files from STAGE``) filled, so they happen at their place among the RUNs with
Docker's rules for directories and trailing slashes. The final stage also writes its
environment for Apptainer (/.singularity.d/env/91-dockerfile.sh, which layers on top keep)
and for Enroot/pyxis (/etc/environment), its LABELs, and ENTRYPOINT + CMD as %runscript.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Protocol, Sequence, Tuple

from launcher.dockerfile import notes as notes_mod
from launcher.dockerfile.copy import STAGING, plan_copy
from launcher.dockerfile.lexer import DockerfileError, Instruction, Ref, exec_form, \
    key_values, plain, shell_word, words
from launcher.dockerfile.runscript import base_entrypoint_post, final_sections
from launcher.dockerfile.stages import Build, Stage, arg_values, platform_values

COPY_FN = """\
# Docker's COPY: _copy MODE DEST SRC... (a directory's contents; into DEST when it is one)
_copy() {
    mode=$1 dest=$2; shift 2
    case $dest in */) mkdir -p "$dest" ;; esac
    if [ "$#" -gt 1 ]; then mkdir -p "$dest"; fi
    for src in "$@"; do
        if [ -d "$src" ] && [ ! -L "$src" ]; then
            mkdir -p "$dest" && cp -a "$src/." "$dest/" && target=$dest
        elif [ -d "$dest" ]; then
            cp -a "$src" "$dest/" && target=$dest/${src##*/}
        else
            mkdir -p "$(dirname "$dest")" && cp -a "$src" "$dest" && target=$dest
        fi
        if [ -n "$mode" ]; then chmod -R "$mode" "$target"; fi
    done
}"""
ENV_TAIL = """\
# The image's environment, as the build resolved it: for Apptainer in an env script that
# layers on top keep, for Enroot/pyxis in /etc/environment (KEY=VALUE lines without spaces
# or quotes; the base image's ENV too, as `enroot import` writes it).
_q() { printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\\\\\''/g")"; }
: >/.singularity.d/env/91-dockerfile.sh
{names}
env -i /bin/sh -c 'for f in /.singularity.d/env/10-docker*.sh /.singularity.d/env/91-dockerfile.sh; do
    if [ -r "$f" ]; then . "$f"; fi; done; env' |
    grep -E '^[A-Za-z_][A-Za-z0-9_]*=[^ "'"'"'\\\\]*$' | grep -vE '^(PWD|SHLVL|_|OLDPWD)=' |
    sort >/etc/environment || true"""


class Context(Protocol):
    root: str

    def kind(self, rel: str) -> Optional[str]: ...

    def glob(self, pattern: str) -> List[str]: ...

    def has_dockerignore(self) -> bool: ...


@dataclass(frozen=True)
class Rendered:
    text: str
    notes: Tuple[str, ...]


@dataclass
class _State:
    """What a stage's instructions have set so far."""

    values: Dict[str, str]
    workdir: str = "/"
    shell: List[str] = field(default_factory=lambda: ["/bin/sh", "-c"])
    env: List[str] = field(default_factory=list)
    args: List[str] = field(default_factory=list)
    post: List[str] = field(default_factory=list)
    files: Dict[str, List[Tuple[str, str]]] = field(default_factory=dict)
    labels: List[Tuple[str, str]] = field(default_factory=list)
    copies: bool = False
    workdir_set: bool = False
    sources: Dict[int, str] = field(default_factory=dict)
    notes: List[str] = field(default_factory=list)


class _Verbatim(str):
    """A %post line written as it is (a RUN's continuation lines: not re-indented)."""


def render_definition(build: Build, context: Context, source: str, header: Sequence[str],
                      arch: str = "amd64") -> Rendered:
    """The definition text (``header`` lines first, as comments) and the notes to print."""
    notes: List[str] = list(build.notes)
    if context.has_dockerignore():
        notes.append(f"{context.root}/.dockerignore is not read: COPY copies every file it "
                     "names (for COPY . that includes .git)")
    blocks = ["\n".join(f"# {line}" for line in header)]
    several = len(build.stages) > 1
    for stage in build.stages:
        final = stage is build.stages[-1]
        blocks.append(_stage(stage, build, context, source, arch, final, several, notes))
    if build.unused_args:
        notes.append(f"--build-arg {', '.join(build.unused_args)}: no ARG of the stages built "
                     "declares it (ignored, as Docker does)")
    return Rendered("\n\n".join(blocks) + "\n", tuple(notes))


def _stage(stage: Stage, build: Build, context: Context, source: str, arch: str,
           final: bool, several: bool, notes: List[str]) -> str:
    out = [f"Bootstrap: {stage.base.bootstrap}"]
    if stage.base.bootstrap != "scratch":
        out.append(f"From: {stage.base.source}")
    if several:
        out.append(f"Stage: {stage.name}")
    if stage.implicit:
        return "\n".join(out)
    state = _State(values=dict(build.global_args), sources=dict(stage.sources))
    for index, ins in enumerate(stage.instructions):
        if index == stage.inherited and stage.inherited:
            _end_inherited(state)
        state.notes = notes if index >= stage.inherited else []
        _instruction(ins, state, build, context, source, arch)
    for origin, pairs in state.files.items():
        out.append("")
        out.append("%files" + (f" from {origin}" if origin else ""))
        out.extend(f"    {src} {dst}" for src, dst in pairs)
    post = ["set -e"] + (COPY_FN.splitlines() if state.copies else []) + state.post
    if state.copies:
        post.append(f"rm -rf {STAGING.rsplit('/', 1)[0]}")
    if final:
        post.extend(base_entrypoint_post(stage) + _env_tail(state.env))
    out += ["", "%post"] + [line if isinstance(line, _Verbatim) or not line else f"    {line}"
                            for line in post]
    if final:
        out.extend(final_sections(stage, state, source, notes))
    return "\n".join(out)


def _end_inherited(state: _State) -> None:
    """ARGs do not cross stages: the parent stage's are unset where this one's own begin."""
    if state.args:
        state.post.append("unset " + " ".join(dict.fromkeys(state.args)))
        for name in state.args:
            if name not in state.env:
                state.values.pop(name, None)
        state.args.clear()


def _instruction(ins: Instruction, state: _State, build: Build, context: Context, source: str,
                 arch: str) -> None:
    where = ins.where(source)
    if "{{" in ins.body:
        raise DockerfileError(f"{where}: '{{{{' is Apptainer's build-argument syntax and cannot "
                              "appear in a definition: write it another way (e.g. '{''{')")
    handler = _HANDLERS.get(ins.keyword)
    if handler is not None:
        try:
            handler(ins, state, build, context, where, arch)
        except DockerfileError as exc:  # a word rule's error: give it the place
            if str(exc).startswith(f"{source}:"):
                raise
            raise DockerfileError(f"{where}: {exc}") from None
        return
    line = notes_mod.note(ins, where)
    if line is None:
        raise DockerfileError(f"{where}: unknown instruction")
    state.notes.append(line)
    if ins.keyword == "VOLUME":  # Docker creates the directory; a bind needs it too
        for path in notes_mod.volume_paths(ins.text):
            state.post.append(f"mkdir -p {shlex.quote(_abs(path, state.workdir))}")


def _arg(ins: Instruction, state: _State, build: Build, context: Context, where: str,
         arch: str) -> None:
    known = {**platform_values(arch), **build.global_args}
    for name, value in arg_values(ins, state.values, build.build_args, where.split(":")[0]):
        if value is None:
            value = known.get(name)
        if value is None:
            continue
        if name in state.env:  # ENV wins over ARG (Docker)
            continue
        state.values[name] = value
        state.args.append(name)
        state.post.append(f"export {name}={shlex.quote(value)}")


def _env(ins: Instruction, state: _State, build: Build, context: Context, where: str,
         arch: str) -> None:
    for name, value in key_values(ins.text, state.values, where):
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise DockerfileError(f"{where}: not a variable name: {name!r}")
        if any(isinstance(seg, Ref) for seg in value):
            state.values.pop(name, None)  # the build's shell resolves it from here on
        else:
            state.values[name] = "".join(str(seg) for seg in value)
        if name in state.env:
            state.env.remove(name)
        state.env.append(name)
        state.post.append(f"export {name}={shell_word(value)}")


def _label(ins: Instruction, state: _State, build: Build, context: Context, where: str,
           arch: str) -> None:
    for name, value in key_values(ins.text, state.values, where, legacy=False):
        text = plain(value, f"{where} {name}")
        state.labels.append((name, " ".join(text.split()) or '""'))


def _maintainer(ins: Instruction, state: _State, build: Build, context: Context, where: str,
                arch: str) -> None:
    state.labels.append(("maintainer", " ".join(ins.text.split())))


def _workdir(ins: Instruction, state: _State, build: Build, context: Context, where: str,
             arch: str) -> None:
    got = words(ins.text, state.values, split=False)
    path = _abs(plain(got[0] if got else [""], where), state.workdir)
    state.workdir, state.workdir_set = path, True
    state.post.append(f"mkdir -p {shlex.quote(path)} && cd {shlex.quote(path)}")


def _shell(ins: Instruction, state: _State, build: Build, context: Context, where: str,
           arch: str) -> None:
    argv = exec_form(ins.text)
    if not argv:
        raise DockerfileError(f"{where}: SHELL takes the exec form, e.g. "
                              '["/bin/bash", "-o", "pipefail", "-c"]')
    state.shell = argv


def _run(ins: Instruction, state: _State, build: Build, context: Context, where: str,
         arch: str) -> None:
    for name, value in ins.flags:
        if name == "mount" and "type=cache" in value.split(","):
            continue  # a cache for the build only: the result is the same without it
        if name not in ("network", "security") or value in ("sandbox", "host", "default"):
            raise DockerfileError(f"{where} --{name}={value}: not supported (a build cache "
                                  "mount is; bind, secret and ssh mounts are not)")
    argv = exec_form(ins.text)
    if argv is not None:
        state.post.append(f"{shlex.join(argv)}  # {where}")
        return
    for extra in ins.body.split("\n")[1:]:
        if extra.lstrip().startswith("%"):
            raise DockerfileError(f"{where}: a continuation line starting with '%' would start "
                                  "an Apptainer section: move the '%' off the line's start")
    state.post.append(f"# {where}")
    lines = (" ".join(shlex.quote(a) for a in state.shell) + " "
             + shlex.quote(ins.body)).split("\n")
    state.post.append(lines[0])
    state.post.extend(_Verbatim(line) for line in lines[1:])


def _copy(ins: Instruction, state: _State, build: Build, context: Context, where: str,
          arch: str) -> None:
    plan_copy(ins, state, context, where)


def _env_tail(names: Sequence[str]) -> List[str]:
    lines = [f'printf \'export {n}=%s\\n\' "$(_q "${n}")" >>/.singularity.d/env/91-dockerfile.sh'
             for n in names]
    return ENV_TAIL.replace("{names}", "\n".join(lines)).splitlines()


def _abs(path: str, workdir: str) -> str:
    return posixpath.normpath(posixpath.join(workdir, path)) if path else workdir


_HANDLERS = {"ARG": _arg, "ENV": _env, "LABEL": _label, "MAINTAINER": _maintainer,
             "WORKDIR": _workdir, "SHELL": _shell, "RUN": _run, "COPY": _copy, "ADD": _copy,
             "CMD": lambda *a: None, "ENTRYPOINT": lambda *a: None}
