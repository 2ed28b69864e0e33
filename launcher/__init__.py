"""torchrun-jsc-kit: a patched torchrun (launcher.torchrun_jsc) and a Slurm jobscript composer.

No import-time side effects; only launcher.torchrun_jsc imports torch, and lazily.
"""

__version__ = "0.1.0"
