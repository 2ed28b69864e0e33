"""Ring 1: the README and docs/ point at things that exist.

Relative links in README.md and docs/*.md resolve to files (and ``#anchors`` to headings,
GitHub's way); every ``make TARGET`` the README names is a Makefile target; the composer
subcommands it names exist; torchrun_jsc's variables table lists what ``--help`` lists.
"""

import re
from pathlib import Path
from typing import Iterator, Set, Tuple

import pytest

from launcher.cli import _parser
from launcher.torchrun_jsc import usage

pytestmark = pytest.mark.ring1

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = [README] + sorted((ROOT / "docs").glob("*.md"))
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces -> '-'."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> Set[str]:
    text = FENCE.sub("", path.read_text())
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6} +(.+?) *$", text, re.M)}


def links(path: Path) -> Iterator[Tuple[str, str]]:
    text = FENCE.sub("", path.read_text())
    for m in LINK.finditer(text):
        target = m.group(1)
        if not re.match(r"[a-z]+:", target):  # http:, https:, mailto: are not checked
            yield target.partition("#")[0], target.partition("#")[2]


def test_docs_exist():
    names = {p.name for p in DOCS}
    assert {"README.md", "development.md", "benchmarks.md", "cluster.md",
            "containers.md"} <= names


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(doc: Path):
    bad = []
    for file_part, anchor in links(doc):
        target = (doc.parent / file_part).resolve() if file_part else doc
        if not target.exists():
            bad.append(f"{file_part}: no such file")
        elif anchor and target.suffix == ".md" and anchor not in anchors(target):
            bad.append(f"{file_part}#{anchor}: no such heading in {target.name}")
    assert not bad, f"{doc.name}: {bad}"


def makefile_targets() -> Set[str]:
    text = (ROOT / "Makefile").read_text()
    return {t for line in re.findall(r"^([\w.\-/ ]+):(?!=)", text, re.M) for t in line.split()}


def test_every_make_target_in_readme_exists():
    text = README.read_text()
    code = FENCE.findall(text) + re.findall(r"`([^`\n]+)`", FENCE.sub("", text))
    named = {m for c in code for line in c.splitlines() for m in re.findall(
        r"(?:^|[\s;&|(])make\s+(?:-\S+\s+|[A-Z_]+=\S*\s+)*([a-z][\w-]*)",
        line.partition(" # ")[0])}  # commands, not their comments
    assert named, "no `make X` found in README.md"
    missing = sorted(named - makefile_targets())
    assert not missing, f"README.md names make targets the Makefile lacks: {missing}"


def test_readme_keeps_the_two_setup_commands_and_the_spec_reference():
    text = README.read_text()
    assert re.search(r"^make demo\b", text, re.M) and re.search(r"^make test\b", text, re.M)
    assert "## Jobscript spec reference" in text
    assert "| key | type, default | meaning |" in text
    assert "docs/benchmarks.md" in text


def test_composer_subcommands_in_readme_exist():
    choices = set()
    for action in _parser()._subparsers._group_actions:  # type: ignore[union-attr]
        choices |= set(action.choices)
    text = README.read_text()
    named = set(re.findall(r"(?:jsc-compose|python -m launcher)\s+([a-z]+)\b", text))
    assert named, "no composer command found in README.md"
    assert named <= choices, f"unknown subcommands: {sorted(named - choices)}"
    assert choices <= named, f"subcommands the README never shows: {sorted(choices - named)}"


def test_readme_variables_table_matches_help():
    text = README.read_text()
    section = text[text.index("### Environment variables"):]
    section = section[:section.index("\n#")]
    in_readme = set(re.findall(r"`(TORCHRUN_JSC_[A-Z_]+)", section))
    in_help = {re.match(r"\w+", name).group(0) for name, _ in usage.ENV_VARS}
    in_help = {n for n in in_help if n.startswith("TORCHRUN_JSC_")}
    assert in_readme == in_help
