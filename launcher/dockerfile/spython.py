"""spython's DockerParser, one stage at a time, for the values it reads right.

Where it sits: ``render`` asks it for a stage's CMD, ENTRYPOINT, EXPOSE and VOLUME. spython
0.3.14 reads those right once it sees one stage with its continuations already joined; for a
whole file it merges stages, runs a builder's RUN in the final image, names a stage that no
longer exists in ``%files from``, turns USER into ``su`` in %post and HEALTHCHECK into a
broken %test (tests/unit/test_dockerfile.py pins each, so an upgrade that changes them is
noticed), and it calls ``sys.exit`` on a stage without FROM. So each stage's lines go in
alone, FROM first, and nothing else of its Recipe is used.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import List, Sequence, Tuple, Union

from launcher.dockerfile.lexer import DockerfileError, Instruction

Form = Union[List[str], str, None]  # exec form, shell form, not set
USED = ("CMD", "ENTRYPOINT", "EXPOSE", "VOLUME")


@dataclass(frozen=True)
class StageValues:
    cmd: Form
    entrypoint: Form
    ports: Tuple[str, ...]
    volumes: Tuple[str, ...]


def stage_values(instructions: Sequence[Instruction]) -> StageValues:
    """The last CMD and ENTRYPOINT (exec form: a list, shell form: the text) and the EXPOSE
    and VOLUME words of one stage's instructions, as spython's DockerParser reads them."""
    try:  # the composer's only user: an extra (pip install 'torchrun-jsc-kit[dockerfile]')
        from spython.main.parse.parsers.docker import DockerParser
    except ImportError:
        raise DockerfileError("jsc-compose dockerfile needs spython==0.3.14, which is not "
                              "installed in this Python: pip install 'spython==0.3.14' (or "
                              "the kit's [dockerfile] extra; sudo make setup installs it)") \
            from None

    parser = DockerParser(None, load=False)
    parser.lines = ["FROM stage"] + [f"{i.keyword} {i.text}" for i in instructions
                                             if i.keyword in USED]
    recipe = next(iter(parser.parse().values()))
    return StageValues(_form(recipe.cmd), _form(recipe.entrypoint), tuple(recipe.ports),
                       tuple(recipe.volumes))


def _form(value: object) -> Form:
    """spython loads JSON where it parses; Docker takes only an array of strings as the
    exec form, anything else (``CMD "x"``, ``CMD 1``) as the shell form's text."""
    if value is None:
        return None
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    if isinstance(value, str):
        return value
    return json.dumps(value)
