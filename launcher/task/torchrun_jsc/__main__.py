"""``python -m launcher.task.torchrun_jsc``: same as the ``torchrun_jsc`` console script."""

import sys

from . import main

sys.exit(main())
