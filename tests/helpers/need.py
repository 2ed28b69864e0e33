"""What a ring 1 or 2 test needs beyond the development venv (a pyenv interpreter, a command
installed by `make setup`): where it is missing the test skips with the reason, so that rings
1-2 run in any venv on any machine; under TORCHRUN_JSC_TESTS_STRICT=1 (`make test`, so CI) a
missing prerequisite fails the test instead, so that no skip is ever counted as a pass there."""

from __future__ import annotations

import glob
import os
import shutil

import pytest

STRICT_ENV = "TORCHRUN_JSC_TESTS_STRICT"


def missing(reason: str) -> None:
    """Skip (fail where strict) with ``reason``: what is missing and how to get it."""
    if os.environ.get(STRICT_ENV) == "1":
        pytest.fail(f"{reason} ({STRICT_ENV}=1: required here)")
    pytest.skip(reason)


def pyenv_python(version: str) -> str:
    """pyenv's Python VERSION (this project's machines have 3.8.18 and 3.13.0)."""
    pattern = f"~/.pyenv/versions/{version}.*/bin/python{version}"
    found = sorted(glob.glob(os.path.expanduser(pattern)))
    if not found:
        missing(f"no Python {version} under ~/.pyenv/versions: `pyenv install {version}` "
                f"to run this test")
    return found[-1]


def command(name: str, how: str = "sudo make setup installs it") -> str:
    """The path of command ``name`` on PATH."""
    path = shutil.which(name)
    if path is None:
        missing(f"{name} is not on PATH ({how})")
    return path
