"""Ring 1: the README and the docs/ site point at things that exist.

Relative links in README.md and docs/**/*.md resolve to files (and ``#anchors`` to headings,
GitHub's way); ``mkdocs build --strict`` passes (every nav page exists, no broken link or
anchor); every ``make TARGET`` the documents name is a Makefile target; the composer
subcommands they name exist and all are shown; torchrun_jsc's variables table lists what
``--help`` lists; the spec reference's tables are the keys' declarations (`make
spec-reference`) and list exactly the keys the spec loader accepts.
"""

import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, Iterator, List, Set, Tuple

import pytest

from launcher import spec as spec_module
from launcher.cli import _parser
from launcher.model import SpecError
from launcher.task.torchrun_jsc import usage
from launcher.yamlread import Reader
from tests.helpers import need

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = [README] + sorted((ROOT / "docs").rglob("*.md"))
SPEC_REFERENCE = ROOT / "docs/reference/spec.md"
TORCHRUN_JSC_REFERENCE = ROOT / "docs/reference/torchrun-jsc.md"
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
    names = {str(p.relative_to(ROOT)) for p in DOCS}
    assert {"README.md", "docs/index.md", "docs/development/index.md",
            "docs/development/benchmarks.md", "docs/development/cluster.md",
            "docs/development/containers.md", "docs/reference/spec.md",
            "docs/reference/cli.md", "docs/reference/torchrun-jsc.md"} <= names


def test_readme_is_short():
    """A cluster user reads it in five minutes; the rest lives in docs/."""
    lines = len(README.read_text().splitlines())
    assert lines <= 260, f"README.md has {lines} lines; move details to docs/"


def test_mkdocs_builds_strict(tmp_path):
    """Every nav page exists and no link or anchor is broken. mkdocs is a test dependency
    (scripts/setup.sh installs it): missing, this skips with the reason, and fails under
    `make test` (tests/helpers/need.py)."""
    try:
        import mkdocs  # noqa: F401
    except ImportError:
        need.missing(f"mkdocs is not installed in {sys.prefix}: pip install mkdocs==1.6.1 "
                     "(scripts/setup.sh installs it)")
    p = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict",
                        "--config-file", str(ROOT / "mkdocs.yml"), "--site-dir",
                        str(tmp_path / "site")], cwd=ROOT, capture_output=True, text=True,
                       timeout=120, check=False)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]


def test_every_docs_page_is_in_the_nav_or_known():
    """A page outside the nav is unreachable on the site."""
    nav = set(re.findall(r":\s*(\S+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), re.M))
    pages = {str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md")}
    missing = pages - nav
    assert not missing, f"docs pages missing from mkdocs.yml's nav: {sorted(missing)}"


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


def make_targets_named(text: str) -> Set[str]:
    code = FENCE.findall(text) + re.findall(r"`([^`\n]+)`", FENCE.sub("", text))
    return {m for c in code for line in c.splitlines() for m in re.findall(
        r"(?:^|[\s;&|(])make\s+(?:-[CWfo]\s+\S+\s+|-\S+\s+|[A-Z_]+=\S*\s+)*([a-z][\w-]*)",
        line.partition(" # ")[0])}  # commands, not their comments


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_make_target_named_exists(doc: Path):
    missing = sorted(make_targets_named(doc.read_text()) - makefile_targets())
    assert not missing, f"{doc.name} names make targets the Makefile lacks: {missing}"


def test_readme_keeps_the_two_setup_commands_and_points_at_the_docs():
    text = README.read_text()
    assert make_targets_named(text), "no `make X` found in README.md"
    assert re.search(r"^make demo\b", text, re.M) and re.search(r"^make test\b", text, re.M)
    for page in ("docs/reference/spec.md", "docs/development/benchmarks.md",
                 "docs/reference/torchrun-jsc.md", "docs/guide/troubleshooting.md"):
        assert f"]({page}" in text, f"README.md does not link {page}"


def test_readme_names_jscs_own_torchrun_jsc():
    for doc in (README, TORCHRUN_JSC_REFERENCE):
        text = doc.read_text()
        assert "HelmholtzAI-FZJ" in text and "torchrun_jsc --version" in text, doc.name


def composer_choices() -> Set[str]:
    choices = set()
    for action in _parser()._subparsers._group_actions:  # type: ignore[union-attr]
        choices |= set(action.choices)
    return choices


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_composer_subcommands_named_exist(doc: Path):
    named = set(re.findall(r"(?:jsc-compose|python -m launcher)\s+([a-z]+)\b", doc.read_text()))
    assert named <= composer_choices(), f"unknown subcommands: {sorted(named - composer_choices())}"


def test_cli_reference_shows_every_subcommand():
    text = (ROOT / "docs/reference/cli.md").read_text()
    named = set(re.findall(r"jsc-compose\s+([a-z]+)\b", text))
    missing = composer_choices() - named
    assert not missing, f"subcommands docs/reference/cli.md never shows: {sorted(missing)}"


def test_torchrun_jsc_variables_table_matches_help():
    text = TORCHRUN_JSC_REFERENCE.read_text()
    section = text[text.index("## Environment variables"):]
    section = section[:section.index("\n#")]
    in_docs = set(re.findall(r"`(TORCHRUN_JSC_[A-Z_]+)", section))
    in_help = {re.match(r"\w+", name).group(0) for name, _ in usage.ENV_VARS}
    in_help = {n for n in in_help if n.startswith("TORCHRUN_JSC_")}
    assert in_docs == in_help


# --- The spec reference against the loader -------------------------------------------------
# Every key the loader accepts passes through Reader.mapping(path, value, allowed): that call
# is the single source of truth. The specs below reach every mapping of the loader (each
# runtime kind, the nested site, requeue, preflight and bind mappings); a new nested mapping
# needs a spec here, and test_probe_reaches_every_mapping says which paths were seen.

PROBES: List[Dict[str, Any]] = [
    {"job": {"nodes": 1, "time": "10", "requeue": {"signal": "USR2"}},
     "site": {"profile": "generic", "venv_build": {"horovod": {"nccl_home": "/n"}}},
     "env": {"set": {"A": "b"}},
     "runtime": {"kind": kind, "image": "/i.sqsh" if kind != "apptainer" else "/i.sif",
                 "binds": [{"source": "/a"}],
                 **({"stage": {"to": "/tmp"}} if kind == "apptainer" else {})}
     if kind != "bare" else {"kind": "bare"},
     "launch": {"preflight": {"fake_gpus": True}},
     "program": ["true"]}
    for kind in ("bare", "apptainer", "enroot", "pyxis")
]
EXPECTED_MAPPINGS = {"", "job", "job.requeue", "site", "site.venv_build",
                     "site.venv_build.horovod", "env", "runtime", "runtime.binds[]", "runtime.stage", "launch",
                     "launch.preflight"}


def accepted_keys(monkeypatch: pytest.MonkeyPatch) -> Tuple[Set[str], Set[str]]:
    """(dotted keys the loader accepts, mapping paths seen), by recording Reader.mapping."""
    import yaml

    seen: Dict[str, Set[str]] = {}
    original = Reader.mapping

    def recording(self, path, value, allowed, *args, **kwargs):  # type: ignore[no-untyped-def]
        seen.setdefault(re.sub(r"\[\d+\]", "[]", path), set()).update(allowed)
        return original(self, path, value, allowed, *args, **kwargs)

    monkeypatch.setattr(Reader, "mapping", recording)
    for probe in PROBES:
        try:
            spec_module.parse_spec(yaml.safe_dump(probe), "probe.yaml")
        except SpecError:
            pass  # the mappings were read before any later value was refused
    keys = {f"{path}.{key}" if path else key for path, allowed in seen.items()
            for key in allowed}
    return keys, set(seen)


def documented_keys() -> Set[str]:
    """Code spans in the first column of the reference's tables and in its headings."""
    text = SPEC_REFERENCE.read_text()
    cells = re.findall(r"^\| *(`[^|]*`[^|]*)\|", text, re.M)
    heads = re.findall(r"^#+ .*$", text, re.M)
    spans = {m for c in cells + heads for m in re.findall(r"`([^`]+)`", c)}
    return {s for s in spans if re.fullmatch(r"[a-z_]+(\[\])?(\.[a-z_]+(\[\])?)*", s)}


def test_probe_reaches_every_mapping(monkeypatch):
    _, paths = accepted_keys(monkeypatch)
    assert paths == EXPECTED_MAPPINGS


def test_spec_reference_lists_every_accepted_key(monkeypatch):
    accepted, _ = accepted_keys(monkeypatch)
    accepted = {k.replace("runtime.binds.", "runtime.binds[].") for k in accepted}
    documented = documented_keys()
    missing = sorted(accepted - documented)
    assert not missing, f"keys the loader accepts that {SPEC_REFERENCE.name} does not list: {missing}"
    stale = sorted(documented - accepted)
    assert not stale, f"keys {SPEC_REFERENCE.name} lists that the loader refuses: {stale}"


def test_spec_reference_is_the_declarations():
    """docs/reference/spec.md's tables are what tests/helpers/specref.py renders from the keys'
    declarations (launcher.spec.KEYS): `make spec-reference` rewrites them."""
    from tests.helpers import specref
    text = SPEC_REFERENCE.read_text(encoding="utf-8")
    assert specref.render(text) == text, "docs/reference/spec.md is stale: make spec-reference"


def test_every_key_is_declared_once():
    """No key path is declared by two owners, and every runtime's keys are declared."""
    from launcher.runtimes import RUNTIME_KEYS, RUNTIMES
    paths = [p for key in spec_module.KEYS for p in key.paths]
    assert len(paths) == len(set(paths)), sorted(p for p in paths if paths.count(p) > 1)
    declared = {n for k in RUNTIME_KEYS for n in k.names}
    for kind, runtime in RUNTIMES.items():
        assert set(runtime.keys) <= declared, (kind, set(runtime.keys) - declared)
