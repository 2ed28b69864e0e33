"""The render stage: a job plan (launcher.plan) or a spec as text, pure and deterministic.

- ``jobscript``: the batch script (`render`, `submit`; the doctor's script);
- ``preview``: what each node of a hypothetical allocation would run (`preview`);
- ``venvjob``: the job that builds ``site.venv`` on a compute node (`venv`);
- ``imagecheck``: the probe `check --image` runs in the image, and its verdict.

Where it sits: spec (load) -> plan -> **render** -> submit. Nothing here touches the machine
(venvjob's ``fill_wheelhouse`` excepted, which `venv --wheelhouse` runs on the login node).
"""
