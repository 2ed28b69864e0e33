"""Ring 1: the site profiles carry the site's documented facts (launcher/model.py
SITE_PROFILES, each with its source), and every one of them gives way to the spec.

jsc: srun --mpi=pspmix for Horovod (psslurm serves PMIx only through ParaStation's plugin),
`module purge` before site.modules, InfiniBand retry defaults exported only where the job's
environment has none, and a `check` warning for the mpirun modes (ParaStation MPI is JSC's
default MPI). generic: none of these.
"""

import re
import subprocess

import pytest
import yaml

from launcher.cli import main
from launcher.render.jobscript import render_jobscript
from launcher.shell import quote
from launcher.model import JSC_ENV_DEFAULTS, SITE_PROFILES
from launcher.spec import parse_spec
from launcher.features.site import site_warnings
from launcher.modes import mode_for
from tests.unit.test_spec_traps import error, parse

ONE = "job: {nodes: 1, gpus_per_node: 4}\nprogram: [x]\n"
HVD = "launch: {mode: horovod}\n"




def test_mpi_plugin_default_follows_the_site():
    assert parse(ONE + "site: jsc\n" + HVD).launch.options.mpi_plugin == "pspmix"
    assert parse(ONE + "site: generic\n" + HVD).launch.options.mpi_plugin == "pmix"
    assert parse(ONE + HVD).launch.options.mpi_plugin == "pmix"  # generic is the default site
    explicit = parse(ONE + "site: jsc\nlaunch: {mode: horovod, mpi_plugin: pmix}\n")
    assert explicit.launch.options.mpi_plugin == "pmix"  # an explicit plugin always wins
    text = render_jobscript(parse(ONE + "site: jsc\n" + HVD))
    assert re.search(r"^srun .*--mpi=pspmix ", text, re.M)


def defaults_of(text: str) -> list:
    """The NAME=VALUE words of the script's `jsc_defaults` lines (launcher/node/job.sh: each
    exported only where the job's environment has no value)."""
    flat = text.replace(" \\\n    ", " ").splitlines()
    return [word for line in flat if line.startswith("jsc_defaults ")
            for word in line.split("  # ")[0].split()[1:]]


def test_jsc_env_defaults_render_only_when_unset():
    text = render_jobscript(parse(ONE + "site: jsc\n"))
    assert defaults_of(text) == [f"{name}={value}" for name, value in JSC_ENV_DEFAULTS]
    assert "NCCL_IB_TIMEOUT" not in render_jobscript(parse(ONE + "site: generic\n"))
    site = parse(ONE + "site: jsc\n").site
    assert set(site.env_defaults) == {"NCCL_IB_TIMEOUT", "NCCL_IB_RETRY_CNT", "UCX_RC_TIMEOUT"}


def test_site_env_and_env_set_override_a_default():
    spec = parse(ONE + "site: {profile: jsc, env: {NCCL_IB_TIMEOUT: \"22\"}}\n"
                 "env: {set: {UCX_RC_TIMEOUT: 8s}}\n")
    text = render_jobscript(spec)
    assert "export NCCL_IB_TIMEOUT=22\n" in text  # the spec's value, literal
    assert "export UCX_RC_TIMEOUT=8s\n" in text
    assert defaults_of(text) == ["NCCL_IB_RETRY_CNT=10"]  # the rest stays
    assert spec.site.env_defaults == ("NCCL_IB_RETRY_CNT",)
    # env.pass: the submit environment's value wins at run time, else the default.
    passed = parse(ONE + "site: jsc\nenv: {pass: [NCCL_IB_TIMEOUT]}\n")
    assert "NCCL_IB_TIMEOUT" in passed.site.env_defaults
    # A spec's own site.env name in env.set is still refused: keep one.
    assert "site.env.NCCL_IB_TIMEOUT: is also set in env.set" in error(
        ONE + "site: {profile: jsc, env: {NCCL_IB_TIMEOUT: \"5\"}}\n"
        "env: {set: {NCCL_IB_TIMEOUT: \"6\"}}\n")


def test_hostile_site_env_value_stays_quoted():
    hostile = "a b $(touch x) `id` \\\" ' ${NCCL_IB_TIMEOUT:-9}"
    spec = parse_spec(yaml.safe_dump({"job": {"nodes": 1}, "program": ["x"], "site": {
        "profile": "jsc", "env": {"UCX_RC_TIMEOUT": hostile.replace("$", "$$")}}}), "x.yaml")
    assert dict(spec.site.env)["UCX_RC_TIMEOUT"] == hostile
    assert "UCX_RC_TIMEOUT" not in spec.site.env_defaults  # the spec's: literal, not a default
    line = f"export UCX_RC_TIMEOUT={quote(hostile)}"
    assert line + "\n" in render_jobscript(spec)
    done = subprocess.run(["bash", "-c", line + '\nprintf %s "$UCX_RC_TIMEOUT"'],
                          capture_output=True, text=True, check=True, timeout=30)
    assert done.stdout == hostile


def test_profile_defaults_are_plain_words():
    # _defaults_line writes them as NAME=VALUE words: nothing there may need quoting.
    for site in SITE_PROFILES.values():
        for name, value in site.env:
            assert re.fullmatch(r"[A-Za-z0-9._,:/+@%^-]*", value), (name, value)


def test_module_purge_before_the_modules_under_jsc():
    text = render_jobscript(parse(ONE + "site: {profile: jsc, modules: [Stages/2025, GCC]}\n"))
    lines = text.splitlines()
    purge = next(i for i, l in enumerate(lines) if l.startswith("module purge"))
    assert lines[purge + 1] == "module load Stages/2025 GCC"
    assert lines[purge - 1].startswith("set +u")
    # ...and the env defaults come after the modules, which may set them.
    assert next(i for i, l in enumerate(lines) if l.startswith(
        "jsc_defaults NCCL_IB_RETRY_CNT=10 NCCL_IB_TIMEOUT=50 UCX_RC_TIMEOUT=4s  # ")) > purge + 1


@pytest.mark.parametrize("site", [
    "jsc",  # no modules: nothing to purge for
    "{profile: jsc, modules: [GCC], module_purge: false}",
    "{profile: generic, modules: [GCC]}",
])
def test_no_module_purge(site):
    assert "module purge" not in render_jobscript(parse(ONE + f"site: {site}\n"))


def test_module_purge_on_generic_and_refusal():
    text = render_jobscript(parse(ONE + "site: {profile: generic, modules: [GCC], "
                                  "module_purge: true}\n"))
    assert "module purge" in text
    assert error(ONE + "site: {profile: jsc, module_purge: 'no'}\n") == \
        "x.yaml: site.module_purge: must be true or false, got 'no'"


@pytest.mark.parametrize("launch, site, warned", [
    ("{mode: mpirun_torchrun}", "jsc", True),
    ("{mode: horovod, mpi: mpirun}", "jsc", True),
    ("{mode: horovod, mpi: mpirun}", "{profile: jsc, modules: [GCC, OpenMPI/4.1.6]}", False),
    ("{mode: horovod}", "jsc", False),  # srun starts the ranks: no host mpirun
    ("{mode: mpirun_torchrun}", "generic", False),
])
def test_jsc_mpirun_warning(launch, site, warned):
    spec = parse(ONE + f"site: {site}\nlaunch: {launch}\n")
    lines = site_warnings(spec, mode_for(spec.launch.mode))
    assert bool(lines) == warned
    if warned:
        (line,) = lines
        assert line.startswith("x.yaml: site.modules: warning: mode ")
        assert "ParaStation MPI" in line and "OpenMPI" in line and "\n" not in line


def test_check_prints_the_jsc_mpirun_warning(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = tmp_path / "m.yaml"
    spec.write_text(ONE + "site: jsc\nlaunch: {mode: mpirun_torchrun}\n")
    assert main(["check", str(spec)]) == 0
    err = capsys.readouterr().err
    assert err.count("ParaStation MPI") == 1


def test_cray_ex_profile_finds_hsn_and_sets_slingshot_defaults():
    """cray-ex: the fast-interface rule (hsn* counts as fast), HPE's libfabric/NCCL settings
    and NCCL's sockets over every hsn NIC, each exported only where the job has no value."""
    spec = parse(ONE + "site: cray-ex\n")
    assert spec.site.hostname_suffix == SITE_PROFILES["generic"].hostname_suffix
    text = render_jobscript(spec)
    lines = text.splitlines()
    defaults = defaults_of(text)
    for pair in ("NCCL_SOCKET_IFNAME=hsn", "FI_CXI_DISABLE_HOST_REGISTER=1",
                 "TORCHRUN_JSC_OFI_NCCL=1"):
        assert pair in defaults, pair
    assert 'jsc_endpoint "$first_node"' in lines
    mine = render_jobscript(parse(ONE + "site: {profile: cray-ex, env: {NCCL_SOCKET_IFNAME: "
                                        "hsn0}}\n"))
    assert 'export NCCL_SOCKET_IFNAME=hsn0' in mine.splitlines()
    assert "NCCL_SOCKET_IFNAME=hsn" not in defaults_of(mine)
    assert "FI_CXI" not in render_jobscript(parse(ONE + "site: generic\n"))
    # LL128 is off on GH200 only: decided on the node (launcher/task/nccl-net.sh).
    assert "NCCL_PROTO" not in text

