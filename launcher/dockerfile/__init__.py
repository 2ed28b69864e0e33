"""``jsc-compose dockerfile``: a Dockerfile -> an Apptainer definition, for ``make image
DOCKERFILE=...`` on a login node without Docker (docs/guide/runtimes.md#from-a-dockerfile).

Where it sits: ``lexer`` reads the text into instructions (continuations, comments, flags,
exec and shell forms, variables), ``stages`` splits them at FROM and resolves ARGs, bases and
the stages the final one needs, ``render`` writes the definition text (pure: the build
context's files come in as a ``Context`` value, ``context`` is the one module that looks at
the disk). spython's DockerParser parses each stage's values (spython.py); what it gets wrong
for a whole file is done here instead, and tests/unit/test_dockerfile.py pins those defects.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from launcher.dockerfile.lexer import DockerfileError
from launcher.dockerfile.render import Context, Rendered, render_definition
from launcher.dockerfile.stages import plan_build

__all__ = ["DockerfileError", "convert"]


def convert(text: str, context: Context, *, source: str = "Dockerfile",
            build_args: Mapping[str, str] = {}, from_local: Mapping[str, str] = {},
            arch: str = "amd64", header: Sequence[str] = ()) -> Rendered:
    """Dockerfile text -> the Apptainer definition text and the notes (one line each) on what
    did not carry over. DockerfileError (one line) for what cannot be converted."""
    build = plan_build(text, build_args, from_local, arch, source)
    return render_definition(build, context, source, header, arch)
