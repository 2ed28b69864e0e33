"""Runtime bare: the program runs on the node as it is (optionally in site.venv).

Nothing to set up, nothing to bind, no image: every task inherits the job's environment.
"""

from __future__ import annotations

from launcher.runtimes.base import ContainerRuntime


class Bare(ContainerRuntime):
    kind = "bare"
