"""Cross-cutting features, one module each; this registry is the only list of them.

A feature is what every job may have whatever its launch mode and runtime: where it runs and
how its nodes meet (``site``), its variables (``env``), its CPUs (``placement``), the
preflight checks (``preflight``), stacks and the progress deadline (``hangs``), checkpoint
and requeue (``requeue``). Each module holds one ``Feature`` subclass that owns all of it:

- its spec keys, each declared once (``keys``: launcher.yamlread.Key, the reference's row;
  ``sections`` for a whole top-level section), and their loading with the one-line errors
  (``load_job``, ``load_launch``; a whole section: the module's ``load``);
- its ``#SBATCH`` options (``sbatch``);
- its batch-script lines, where in the script they go being the hook's name:
  ``environment`` (a paragraph of its own, before the geometry), ``geometry`` (lines in the
  geometry paragraph), ``setup`` (a paragraph of its own, after the runtime's lines);
- the names it exports to the tasks (``exports``: their value must win over the image's;
  ``forwards``: they only need to reach a container that passes nothing by itself);
- what it puts around the launch: the ``prelude`` every task starts through, ``steps`` run
  before the launch, ``before_launch`` lines, and the ``verdict`` after it.

Every hook has a default that does nothing, so a feature writes only what it has. The job
plan (launcher.plan) asks every feature, in the order of ``FEATURES``, and is the one place
where two features meet: the ``--signal`` both hangs and requeue want, the line after the
launch. Nothing else names a feature's module except the spec loader, which reads the two
whole sections (``site``, ``env``) where the spec's order puts them.

Adding a feature: docs/development/architecture.md, "Adding a feature".
"""

from __future__ import annotations

from typing import Tuple

from launcher.features.base import PURPOSES, Context, Feature, Purpose, SbatchOption
from launcher.features.env import ENV
from launcher.features.hangs import HANGS
from launcher.features.placement import PLACEMENT
from launcher.features.preflight import PREFLIGHT
from launcher.features.requeue import REQUEUE
from launcher.features.site import SITE
from launcher.features.spare import SPARE

# The order is the script's: placement's lines before the rendezvous (site's) in the geometry
# paragraph, spare's split of the node list after site's $first_node, site's paragraph before
# env's (the modules first), the preflight step, the hangs paragraph before the requeue one.
# The spec's keys are listed in this order too.
FEATURES: Tuple[Feature, ...] = (PLACEMENT, SITE, SPARE, ENV, PREFLIGHT, HANGS, REQUEUE)

__all__ = ["FEATURES", "PURPOSES", "Context", "Feature", "Purpose", "SbatchOption"]
