"""The ``launch.preflight`` key of a spec: the doctor's checks as the job's first step.

Where it sits: **spec** (called by launcher.spec) -> launcher.doctor.ship -> jobscript text.
``true`` runs every check; a mapping sets ``fake_gpus`` (the lab's fake GRES: the GPU check
counts CUDA_VISIBLE_DEVICES only and says so). ``false`` or absent: no step.
"""

from __future__ import annotations

from typing import Any, Optional

from launcher.model import Preflight
from launcher.yamlread import Reader

_KEYS = ("fake_gpus",)


def load_preflight(r: Reader, value: Any) -> Optional[Preflight]:
    if value is None or value is False:
        return None
    if value is True:
        return Preflight()
    if not isinstance(value, dict):
        raise r.fail("launch.preflight", "must be true, false or a mapping {fake_gpus: BOOL}",
                     value)
    m = r.mapping("launch.preflight", value, _KEYS)
    return Preflight(fake_gpus=r.boolean("launch.preflight.fake_gpus",
                                         m.get("fake_gpus", False)))
