"""Code that runs on the compute nodes outside any container, with the host's python3 or bash
(docs/development/node-code.md): standard library only, Python >= 3.6 (RHEL 8's python3).

- ``net``: the address and interface rule (also imported by torchrun_jsc and the Ray agent).
- ``stacks``: the stack collector and the progress watcher (launch.hang_timeout).
- ``doctor``: the doctor's per-node checks and its report.
- ``run.py``: the entry the jobs start, ``python3 -I KIT/node/run.py COMMAND ARGS``.

Imports: the standard library, each other and launcher.slurm; never launcher.task, never a
composer module (tests/unit/test_layout.py).
"""
