"""Ring 1: `jsc-compose venv` (launcher.render.venvjob), site.env and the run job's modules check:
validation (one-line errors) and the rendered text."""

from __future__ import annotations

import re

import pytest

from launcher.render.jobscript import render_jobscript
from launcher.model import SpecError
from launcher.spec import parse_spec
from launcher.render.venvjob import render_venv_job


def spec(site: str, env: str = "{}", name: str = "t.yaml"):
    return parse_spec(f"job: {{nodes: 2, partition: batch, time: '00:20:00'}}\n"
                      f"site: {site}\nenv: {env}\nprogram: [python3, t.py]\n", name)


@pytest.mark.parametrize("site, env, message", [
    ("{env: {NCCL_IB_GID_INDEX: $3}}", "{}", "t.yaml: site.env.NCCL_IB_GID_INDEX: values are "
     "exported literally and '$' is never expanded"),
    ("{env: {1BAD: x}}", "{}", "t.yaml: site.env: keys must be environment variable names"),
    ("{env: {A: x}}", "{set: {A: y}}", "t.yaml: site.env.A: is also set in env.set"),
    ("{env: {A: x}}", "{pass: [A]}", "t.yaml: site.env.A: is also set in env.set"),
    ("{venv: .}", "{}", "t.yaml: site.venv: must name the venv directory itself"),
    ("{venv_build: {requirement: r.txt}}", "{}",
     "t.yaml: site.venv_build: unknown key 'requirement' (did you mean 'requirements'?)"),
    ("{venv_build: {pip_options: --no-index}}", "{}",
     "t.yaml: site.venv_build.pip_options: must be a list"),
    ("{venv_build: {horovod: {package: horovod}}}", "{}",
     "t.yaml: site.venv_build.horovod.nccl_home: is required"),
    ("{venv_build: {horovod: {nccl_home: nccl}}}", "{}",
     "t.yaml: site.venv_build.horovod.nccl_home: must be an absolute path"),
])
def test_site_keys_are_validated_in_one_line(site, env, message):
    with pytest.raises(SpecError) as info:
        spec(site, env)
    assert str(info.value).startswith(message) and "\n" not in str(info.value)


def test_site_env_is_exported_and_reaches_enroot_by_name():
    s = spec("{profile: jsc, env: {NCCL_IB_GID_INDEX: '3'}}")
    assert "\nexport NCCL_IB_GID_INDEX=3\n" in render_jobscript(s)
    enroot = parse_spec("job: {nodes: 1}\nsite: {env: {NCCL_IB_GID_INDEX: '3'}}\n"
                        "runtime: {kind: enroot, image: i.sqsh}\nprogram: [python3]\n", "e.yaml")
    # Forwarded by name from each task (enroot-start.sh's list), never by value.
    names = re.search(r"^enroot_names='([^']*)'$", render_jobscript(enroot), re.M)
    assert names and "NCCL_IB_GID_INDEX" in names.group(1).split()


def test_build_script_purges_loads_and_swaps_last():
    s = spec("{venv: envs/py, modules: [Stages/2025, 'GCC 13'], venv_build: {pip_options: "
             "[--no-index], horovod: {nccl_home: /p/nccl}}}", name="jobs/t.yaml")
    text = render_venv_job(s, pip_options=["--find-links=/w h"])
    for line in ("#SBATCH --job-name=venv-t", "#SBATCH --nodes=1", "#SBATCH --partition=batch",
                 "#SBATCH --time=00:20:00", "requirements=jobs/requirements.txt", "venv=envs/py",
                 "module purge\nmodule load Stages/2025 'GCC 13'\n",
                 "pip install --no-index '--find-links=/w h' -r \"${requirements}\"",
                 "env HOROVOD_NCCL_HOME=/p/nccl HOROVOD_GPU_OPERATIONS=NCCL"):
        assert line in text, line
    order = [text.index(k) for k in ("module purge", "python3 -m venv", "pip install",
                                     ".jsc-modules", 'mv -T -- "$link" "$venv"', "trap - EXIT")]
    assert order == sorted(order)
    assert "#SBATCH --exclusive" not in text and "proxy.example" not in text
    with pytest.raises(SpecError, match="t.yaml: site.venv: is not set"):
        render_venv_job(spec("jsc"))
