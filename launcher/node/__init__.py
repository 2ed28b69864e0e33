"""Agents that run on the compute nodes, started by the jobs.

Where code runs: docs/development/index.md#where-code-runs.

The node side: standard library, launcher.slurm, launcher.torchrun_jsc and each other only,
never a composer module (spec, modes, runtimes, rendering) nor PyYAML. tests/unit/test_layout.py
checks it. Nothing is imported here, so importing one agent loads only what it needs.

- ``ray``: the per-node Ray agent of launch mode ray (run as ``launcher.ray_node``).
- ``procs``: its child processes: start, stop, leave nothing behind.
"""
