"""COPY and ADD -> %files staging lines and the %post copy at the instruction's place.

Where it sits: part of ``launcher.dockerfile.render``. Apptainer copies %files before %post
runs, with ``cp -r``'s rules; Docker copies at the instruction's place among the RUNs, a
directory's contents rather than the directory, into DEST when DEST ends with '/' or several
sources are given. So each source is staged under /.dockerfile/copy/LINE/N/ by %files (or
``%files from STAGE`` for ``COPY --from``) and copied into place in %post by ``_copy``
(render.COPY_FN), which keeps Docker's rules. A local source is relative to the build
context and must exist there: a missing one is one line before any build starts.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from typing import List, Tuple

from launcher.dockerfile.lexer import DockerfileError, Instruction, exec_form, plain, words

STAGING = "/.dockerfile/copy"
ARCHIVE = re.compile(r"\.(tar|tar\.gz|tgz|tar\.bz2|tbz2?|tar\.xz|txz)$")
GLOB = re.compile(r"[*?\[]")
URL = re.compile(r"^([a-z][a-z0-9+.-]*://|git@)")


def plan_copy(ins: Instruction, state, context, where: str) -> None:
    """Stage the sources (state.files) and append the copy to state.post."""
    mode, origin = _flags(ins, state, where)
    items = _items(ins, state, where)
    if len(items) < 2:
        raise DockerfileError(f"{where}: expected {ins.keyword} SRC... DEST")
    dest = items[-1]
    if not dest.startswith("/") and not state.workdir_set:
        state.notes.append(f"{where} to {dest}: relative to /, as no WORKDIR came before it "
                           "(Docker: the base image's WORKDIR, which is not known here)")
    target = posixpath.normpath(posixpath.join(state.workdir, dest))
    if dest.endswith("/") and target != "/":
        target += "/"
    staged: List[Tuple[str, str]] = []
    for number, src in enumerate(items[:-1], 1):
        if origin is None:
            staged += _local(ins, src, number, context, where)
        else:
            staged.append(_from_stage(ins, src, number, where))
    state.files.setdefault(origin, []).extend(staged)
    state.copies = True
    state.post.append(f"# {where}")
    archives = [s for _, s in staged if ins.keyword == "ADD" and origin is None
                and ARCHIVE.search(s)]
    plain_ones = [s for _, s in staged if s not in archives]
    quoted = shlex.quote(target)
    for archive in archives:  # ADD unpacks a local tar archive into DEST
        state.post.append(f"mkdir -p {quoted} && tar -xf {shlex.quote(archive)} -C {quoted}")
    if plain_ones:
        state.post.append(f"_copy {shlex.quote(mode)} {quoted} "
                          + " ".join(shlex.quote(s) for s in plain_ones))


def _flags(ins: Instruction, state, where: str) -> Tuple[str, object]:
    mode, origin = "", None
    for name, value in ins.flags:
        if name == "from":
            origin = state.sources[ins.line]
        elif name == "chmod" and re.fullmatch(r"[0-7]{3,4}", value):
            mode = value
        elif name == "chown":
            state.notes.append(f"{where} --chown={value}: not carried over: the files belong "
                               "to root in the image; the calling user reads them")
        elif name != "link":  # --link only changes Docker's layer caching
            raise DockerfileError(f"{where} --{name}{'=' + value if value else ''}: not "
                                  "supported")
    return mode, origin


def _items(ins: Instruction, state, where: str) -> List[str]:
    listed = exec_form(ins.text)
    if listed is not None:
        got = [words(item, state.values, split=False) for item in listed]
        return [plain(w[0] if w else [""], where) for w in got]
    return [plain(w, where) for w in words(ins.text, state.values)]


def _local(ins: Instruction, src: str, number: int, context, where: str
           ) -> List[Tuple[str, str]]:
    if URL.match(src):
        raise DockerfileError(f"{where} {src}: URLs are not fetched: download the file next to "
                              "the Dockerfile and COPY it, or fetch it in a RUN")
    rel = posixpath.normpath(src.lstrip("/")) if src.strip("/") else "."
    if rel == ".." or rel.startswith("../"):
        raise DockerfileError(f"{where} {src}: outside the build context {context.root}")
    if GLOB.search(rel):
        found = context.glob(rel)
        if not found:
            raise DockerfileError(f"{where} {src}: no file in the build context {context.root} "
                                  "matches")
    elif context.kind(rel) is None:
        raise DockerfileError(f"{where} {src}: no such file or directory in the build context "
                              f"{context.root}")
    else:
        found = [rel]
    out = []
    for index, path in enumerate(found):
        host = context.root if path == "." else posixpath.join(context.root, path)
        name = "context" if path == "." else posixpath.basename(path)
        sub = f"{number}" if len(found) == 1 else f"{number}.{index + 1}"
        out.append((_no_blank(host, where), _no_blank(f"{STAGING}/{ins.line}/{sub}/{name}",
                                                      where)))
    return out


def _from_stage(ins: Instruction, src: str, number: int, where: str) -> Tuple[str, str]:
    if GLOB.search(src):
        raise DockerfileError(f"{where} {src}: wildcards in COPY --from are not supported: "
                              "name the files")
    path = posixpath.normpath("/" + src.lstrip("/"))
    name = posixpath.basename(path) or "root"
    return _no_blank(path, where), _no_blank(f"{STAGING}/{ins.line}/{number}/{name}", where)


def _no_blank(path: str, where: str) -> str:
    if re.search(r"\s", path):
        raise DockerfileError(f"{where}: {path!r}: Apptainer's %files cannot name a path with "
                              "blanks: rename it")
    return path
