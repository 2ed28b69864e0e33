"""The build context as data for the renderer: which paths exist, what a glob matches.

Where it sits: the one module of ``launcher.dockerfile`` that reads the disk. ``render``
takes any object with this shape, so ring-1 tests pass a dict (tests/unit/test_dockerfile.py)
and nothing there touches files.
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from typing import List, Mapping, Optional


@dataclass(frozen=True)
class DiskContext:
    """A directory on this machine (the Dockerfile's, or --context)."""

    root: str

    def kind(self, rel: str) -> Optional[str]:
        path = os.path.join(self.root, rel)
        if os.path.isdir(path):
            return "dir"
        return "file" if os.path.exists(path) else None

    def glob(self, pattern: str) -> List[str]:
        found = glob.glob(os.path.join(glob.escape(self.root), pattern))
        return sorted(os.path.relpath(p, self.root) for p in found)

    def has_dockerignore(self) -> bool:
        return os.path.isfile(os.path.join(self.root, ".dockerignore"))


@dataclass(frozen=True)
class FakeContext:
    """A context from a mapping of relative path -> "file" or "dir" (tests, dry runs)."""

    root: str
    paths: Mapping[str, str]
    dockerignore: bool = False

    def kind(self, rel: str) -> Optional[str]:
        rel = os.path.normpath(rel)
        if rel == ".":
            return "dir"
        if rel in self.paths:
            return self.paths[rel]
        return "dir" if any(p.startswith(rel + "/") for p in self.paths) else None

    def glob(self, pattern: str) -> List[str]:
        import fnmatch

        return sorted(p for p in self.paths if fnmatch.fnmatchcase(p, pattern))

    def has_dockerignore(self) -> bool:
        return self.dockerignore
