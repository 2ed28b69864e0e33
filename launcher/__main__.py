"""``python -m launcher``: the jobscript composer CLI (see launcher.cli)."""

import sys

from launcher.cli import main

sys.exit(main(prog="python -m launcher"))
