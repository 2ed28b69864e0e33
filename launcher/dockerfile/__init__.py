"""``jsc-compose dockerfile``: a Dockerfile -> an Apptainer definition, for ``make image
DOCKERFILE=...`` on a login node without Docker (docs/guide/runtimes.md#from-a-dockerfile).

Where it sits: ``lexer`` reads the text into instructions (continuations, comments, flags,
exec and shell forms, variables), ``stages`` splits them at FROM and resolves ARGs, bases and
the stages the final one needs, ``render`` writes the definition text (pure: the build
context's files come in as a ``Context`` value, ``context`` is the one module that looks at
the disk). spython's DockerParser parses each stage's values (spython.py); what it gets wrong
for a whole file is done here instead, and tests/unit/test_dockerfile.py pins those defects.
"""

from launcher.dockerfile.lexer import DockerfileError

__all__ = ["DockerfileError"]
