"""Small helpers for the bench: medians of interleaved repeats and a markdown table."""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence


@dataclass
class Series:
    name: str
    values: List[float]

    @property
    def median(self) -> float:
        return statistics.median(self.values) if self.values else float("nan")

    def cell(self, unit: str) -> str:
        if not self.values:
            return "n/a"
        return (f"{self.median:.3g} {unit} (min {min(self.values):.3g}, "
                f"max {max(self.values):.3g}, n={len(self.values)})")


def seconds_to_ready(output: Optional[str], start: float, ranks: int) -> Optional[float]:
    """Latest `READY rank=R t=EPOCH` line of bench/programs/ready.py minus start, if all came."""
    ready = [float(t) for t in re.findall(r"READY rank=\d+ t=([\d.]+)", output or "")]
    return max(ready) - start if len(ready) == ranks else None


def ratio(a: Series, b: Series) -> str:
    if not a.values or not b.values or b.median == 0:
        return "n/a"
    return f"{a.median / b.median:.2f}x"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def interleave(runs: Dict[str, "callable"], repeats: int) -> Dict[str, Series]:
    """Run each variant once per round, round after round, so drift hits all alike."""
    out = {name: Series(name, []) for name in runs}
    for _ in range(repeats):
        for name, fn in runs.items():
            value: Optional[float] = fn()
            if value is not None:
                out[name].values.append(value)
    return out
