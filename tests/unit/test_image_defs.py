"""Ring 1: the container definitions and their build script, checked without building.

Apptainer rejects a definition whose `{{ ARG }}` has no value and a `--build-arg` the
definition does not use; both would only show after minutes of building. Also: the sections
every image promises (labels, runscript, help, test, environment) and shellcheck.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DEFS = sorted((REPO / "containers").glob("*.def"))
SCRIPT = REPO / "scripts" / "build-image.sh"


def sections(text: str) -> dict[str, str]:
    parts = re.split(r"^%(\w+)[ \t]*$", text, flags=re.M)
    return {name: body for name, body in zip(parts[1::2], parts[2::2])}


def declared_args(text: str) -> set[str]:
    body = sections(text).get("arguments", "")
    return {line.split("=", 1)[0].strip() for line in body.splitlines() if "=" in line}


def used_args(text: str) -> set[str]:
    return set(re.findall(r"\{\{\s*(\w+)\s*\}\}", text))


def script_args(command: str) -> set[str]:
    """--build-arg names that build-image.sh passes in cmd_COMMAND."""
    text = SCRIPT.read_text()
    body = re.search(rf"^cmd_{command}\(\) \{{\n(.*?)^\}}", text, flags=re.M | re.S).group(1)
    return set(re.findall(r'--build-arg "(\w+)=', body))


def test_there_are_definitions() -> None:
    assert {d.name for d in DEFS} == {"base-local.def", "base-docker.def", "base-cuda.def",
                                      "base-ngc.def", "pytorch.def", "horovod.def",
                                      "launchers.def"}


@pytest.mark.parametrize("definition", DEFS, ids=lambda d: d.name)
def test_every_used_argument_has_a_default_and_every_default_is_used(definition: Path) -> None:
    text = definition.read_text()
    assert used_args(text) == declared_args(text)


@pytest.mark.parametrize("definition,command", [
    ("base-local.def", "base"), ("pytorch.def", "image"), ("horovod.def", "horovod"),
    ("launchers.def", "launchers")])
def test_script_passes_only_arguments_the_definition_uses(definition: str, command: str) -> None:
    passed = script_args(command)
    declared = declared_args((REPO / "containers" / definition).read_text())
    if command == "base":  # cmd_base serves every base; the docker one takes FROM, the cuda one more
        for other in ("base-docker.def", "base-cuda.def", "base-ngc.def"):
            declared |= declared_args((REPO / "containers" / other).read_text())
    assert passed and passed <= declared


@pytest.mark.parametrize("definition", ["pytorch.def", "horovod.def", "launchers.def"])
def test_images_have_the_promised_sections(definition: str) -> None:
    text = (REPO / "containers" / definition).read_text()
    found = sections(text)
    for name in ("post", "environment", "runscript", "test", "help"):
        assert found.get(name, "").strip(), f"{definition}: %{name} missing or empty"
    for label in ("torch-version", "python-version", "git-commit", "base"):
        assert f"org.torchrun-jsc.{label} " in found["post"]
    assert 'exec "$@"' in found["runscript"]


def test_launcher_image_labels_launcher_version_and_tests_torchrun_jsc() -> None:
    found = sections((REPO / "containers" / "pytorch.def").read_text())
    assert "org.torchrun-jsc.launcher-version " in found["post"]
    assert "torchrun_jsc --standalone" in found["test"]


def test_build_script_passes_shellcheck() -> None:
    assert shutil.which("shellcheck"), "shellcheck missing: run `make setup`"
    r = subprocess.run(["shellcheck", str(SCRIPT)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout
