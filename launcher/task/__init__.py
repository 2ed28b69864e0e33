"""Code that runs in the tasks' Python on the compute nodes: the image's python3 inside a
container, the venv's on a bare node (docs/development/node-code.md).

- ``torchrun_jsc``: the launcher (agent per node), imports torch.
- ``ray``, ``procs``: the per-node Ray agent of launch mode ray and its child processes.
- ``hook/sitecustomize.py``: the stack hook, first on every rank's PYTHONPATH.
- ``run.py``: the entry the jobs start, ``python3 KIT/task/run.py COMMAND ARGS``.

Imports: the standard library, the image's torch or ray (lazily), launcher.node and
launcher.slurm; never a composer module nor PyYAML (tests/unit/test_layout.py).
"""
