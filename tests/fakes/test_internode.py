"""Ring 2: site jsc's inter-node name, chosen on the first node when the job starts
(launcher/features/site.py): the rendered rendezvous lines run by bash with the fakes' `scontrol`
and `getent hosts` on PATH (FAKE_HOSTS: the names that resolve), SYSTEMNAME set to each JSC
system, to another value or unset; then whole rendered jobs.

Proves: each system gets its name (JUWELS, JURECA-DC, JUSUF: `i`; JUPITER, JEDI:
`-interconnect-1.jupiter.internal`), $SYSTEMNAME decides even where another candidate also
resolves, without it the first candidate that resolves wins in a fixed order, a name that does
not resolve stops the job before anything is launched with one stderr line naming every name
tried, and a spec's own hostname_suffix still wins with no lookup at all.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Optional

import pytest

from launcher import kit
from launcher.features.site import rendezvous_lines
from launcher.shell import render_statement
from launcher.spec import parse_spec
from tests.helpers import fake
from tests.helpers.cluster import Cluster

JWB, JPBO = "jwb0001", "jpbo-001-01"
IC = "-interconnect-1.jupiter.internal"
BOTH = f"{JWB}i {JWB}{IC} {JPBO}i {JPBO}{IC}"  # every candidate of both nodes resolves


def _rendezvous(tmp_path: Path, nodelist: str, system: Optional[str], hosts: str,
                site: str = "jsc", on_node: bool = True) -> subprocess.CompletedProcess:
    """The jobscript's rendezvous lines (batch scope) after its kit lines (the kit's functions,
    launcher/node/job.sh, which they call), then $rdzv_host on stdout."""
    spec = parse_spec(f"job: {{nodes: 2}}\nsite: {site}\nlaunch: {{rdzv_port: 29400}}\n"
                      "program: [p]\n", "t.yaml")
    script = "\n".join(render_statement(s) for s in
                       kit.lines(str(kit.installed())) + rendezvous_lines(spec))
    env = dict(os.environ, **fake.install(tmp_path / "bin", tmp_path / "log"),
               SLURM_JOB_NODELIST=nodelist, FAKE_HOSTS=hosts,
               SLURMD_NODENAME=nodelist.split("[")[0])  # a batch script runs on a node
    env.pop("SYSTEMNAME", None)
    if not on_node:
        env.pop("SLURMD_NODENAME")
    if system is not None:
        env["SYSTEMNAME"] = system
    return subprocess.run(["bash", "-euo", "pipefail", "-c", script + '\necho "$rdzv_host"'],
                          env=env, capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.parametrize("system, nodelist, first, suffix", [
    ("juwels", "jwc[0001-0002]", "jwc0001", "i"),
    ("juwelsbooster", "jwb[0001-0002]", JWB, "i"),
    ("jurecadc", "jrc[0001-0002]", "jrc0001", "i"),
    ("jusuf", "jsfc[001-002]", "jsfc001", "i"),
    ("jupiter", "jpbo-001-[01-02]", JPBO, IC),
    ("jedi", "jpbo-001-[01-02]", JPBO, IC),
])
def test_each_system_gets_its_name(tmp_path, system, nodelist, first, suffix):
    """Both candidates resolve here: the one listed for $SYSTEMNAME is taken."""
    done = _rendezvous(tmp_path, nodelist, system, f"{first}i {first}{IC}")
    assert (done.returncode, done.stdout, done.stderr) == (0, first + suffix + "\n", "")


@pytest.mark.parametrize("system", [None, "", "deep"])  # unset, empty, a system not listed
@pytest.mark.parametrize("hosts, expected", [
    (f"{JPBO}{IC}", f"{JPBO}{IC}"),  # JUPITER's name is the only one that resolves
    (f"{JPBO}i", f"{JPBO}i"),
    (BOTH, f"{JPBO}i"),  # both: the fixed order, `i` first
])
def test_without_a_listed_system_the_first_name_that_resolves_wins(tmp_path, system, hosts,
                                                                   expected):
    done = _rendezvous(tmp_path, "jpbo-001-[01-02]", system, hosts)
    assert (done.returncode, done.stdout, done.stderr) == (0, expected + "\n", "")


@pytest.mark.parametrize("system, tried", [
    (None, f"SYSTEMNAME unset; tried {JPBO}i, {JPBO}{IC}"),
    ("deep", f"SYSTEMNAME deep; tried {JPBO}i, {JPBO}{IC}"),
    # JUPITER's name only: the `i` name resolving does not make it right there
    ("jupiter", f"SYSTEMNAME jupiter; tried {JPBO}{IC}"),
    ("juwelsbooster", f"SYSTEMNAME juwelsbooster; tried {JPBO}i"),
])
def test_a_name_that_does_not_resolve_is_one_line(tmp_path, system, tried):
    hosts = f"{JPBO}i" if system == "jupiter" else "nothing"
    done = _rendezvous(tmp_path, "jpbo-001-[01-02]", system, hosts)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr == f"jsc-compose: no inter-node name of {JPBO} resolves ({tried}): " \
        "set site.hostname_suffix in the spec\n"


@pytest.mark.parametrize("site, expected", [
    ("{profile: jsc, hostname_suffix: -ib}", f"{JPBO}-ib"),
    ("{profile: jsc, hostname_suffix: ''}", JPBO),
    ("{profile: generic, hostname_suffix: -hs}", f"{JPBO}-hs"),
])
def test_a_fixed_suffix_wins_without_a_lookup(tmp_path, site, expected):
    """Nothing resolves and SYSTEMNAME says jupiter: a fixed suffix is used as written."""
    done = _rendezvous(tmp_path, "jpbo-001-[01-02]", "jupiter", "", site=site)
    assert (done.returncode, done.stdout, done.stderr) == (0, expected + "\n", "")


# --- whole rendered jobs ------------------------------------------------------------------

@pytest.fixture
def cluster(tmp_path: Path) -> Cluster:
    return Cluster(tmp_path)


TORCHRUN = """\
    job: {nodes: 2}
    site: jsc
    launch: {rdzv_port: 29400}
    program: [python3, t.py]
    """


def test_a_jupiter_job_rendezvouses_on_the_interconnect_name(cluster):
    done = cluster.run(cluster.render(TORCHRUN), SYSTEMNAME="jupiter",
                       SLURM_JOB_NODELIST="jpbo-001-[01-02]", FAKE_HOSTS=f"{JPBO}i {JPBO}{IC}")
    assert done.returncode == 0, done.stderr
    assert f"rendezvous {JPBO}{IC}:29400" in done.stdout
    runs = cluster.records("torchrun_jsc")
    assert len(runs) == 2
    for run in runs:
        assert f"--rdzv_endpoint={JPBO}{IC}:29400" in run["argv"]


def test_an_unresolvable_name_launches_nothing(cluster):
    done = cluster.run(cluster.render(TORCHRUN), SLURM_JOB_NODELIST="jpbo-001-[01-02]",
                       FAKE_HOSTS="", SLURMD_NODENAME=JPBO)  # the batch script's node
    assert done.returncode == 1
    assert done.stderr == f"jsc-compose: no inter-node name of {JPBO} resolves (SYSTEMNAME " \
        f"unset; tried {JPBO}i, {JPBO}{IC}): set site.hostname_suffix in the spec\n"
    assert not cluster.records("srun") and not cluster.records("torchrun_jsc")


def test_ray_agents_get_the_suffix_the_job_picked(cluster):
    """Each agent finds its own node's address as SLURMD_NODENAME + --suffix."""
    (cluster.dir / "r.sif").write_text("")
    script = cluster.render("""\
        job: {nodes: 2}
        site: jsc
        runtime: {kind: apptainer, image: r.sif}
        launch: {mode: ray, procs_per_node: 2, rdzv_port: 29400}
        program: [python3, d.py]
        """)
    done = cluster.run(script, SYSTEMNAME="jedi", SLURM_JOB_NODELIST="jpbo-001-[01-02]",
                       FAKE_HOSTS=f"{JPBO}{IC}")
    assert done.returncode == 0, done.stderr
    agents = cluster.records("ray-node")  # the kit's agent: python3 KIT/task/run.py ray-node
    assert len(agents) == 2
    for rec in agents:
        assert rec["run"] == f"{kit.installed()}/task/run.py"  # from the kit, by path
        assert rec["argv"][:2] == [f"--head={JPBO}{IC}:29400", f"--suffix={IC}"]


def test_deepspeed_hostfile_names_every_node_by_its_interconnect_name(cluster):
    script = cluster.render("""\
        job: {nodes: 2}
        site: jsc
        launch: {mode: deepspeed, procs_per_node: 2, rdzv_port: 29400}
        program: [python3, d.py]
        """)
    done = cluster.run(script, SYSTEMNAME="jupiter", SLURM_JOB_NODELIST="jpbo-001-[01-02]",
                       FAKE_HOSTS=f"{JPBO}{IC}")
    assert done.returncode == 0, done.stderr
    script = f"{kit.installed()}/task/deepspeed-node.sh"  # the kit's, by path
    (launch,) = [r for r in cluster.records("srun") if script in r["argv"]]
    hosts = launch["argv"][launch["argv"].index(script) + 1]
    assert hosts == f"{JPBO}{IC} slots=2\njpbo-001-02{IC} slots=2\n"


@pytest.mark.parametrize("system, suffix", [(None, "i"), ("jupiter", IC)])
def test_outside_the_jobs_nodes_the_first_candidate_is_taken_and_said(tmp_path, system,
                                                                      suffix):
    """salloc's shell on a login node (no SLURMD_NODENAME; the doctor inside an allocation):
    the nodes' names may resolve only on the nodes, so the first candidate is used, in one
    line; on a node the same lookup stops the job (above)."""
    done = _rendezvous(tmp_path, "jwb[0001-0002]", system, "", on_node=False)
    assert (done.returncode, done.stdout) == (0, f"{JWB}{suffix}\n"), done.stderr
    assert done.stderr.startswith(f"jsc-compose: {JWB}{suffix} does not resolve on "), done.stderr
    assert done.stderr.rstrip().endswith("outside the job's nodes (tried "
                                         f"{JWB}{suffix}" + (f", {JWB}{IC}" if system is None
                                                             else "") +
                                         "): using it as the inter-node name"), done.stderr
    assert done.stderr.count("\n") == 1
