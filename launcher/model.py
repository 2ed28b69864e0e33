"""The frozen data a job spec becomes, and the composer's two error types: SpecError (the
spec, or an argument, is wrong) and SubmitError (writing, submitting or a step on the
machine failed).

Where it sits: on the ground floor: spec (YAML -> these types) -> features, modes, runtimes
-> the job plan -> text -> submit. Pure data: no I/O, no validation (launcher.spec does that).
"""

from __future__ import annotations

import reprlib
from dataclasses import dataclass
from typing import Any, Literal, Optional, Tuple, Union

RuntimeKind = Literal["bare", "apptainer", "enroot", "pyxis"]
MISSING = object()  # SpecError's value when there is none to show


class SpecError(Exception):
    """A spec that cannot be rendered; str() is the one line the CLI prints."""

    def __init__(self, file: str, path: str, message: str, value: Any = MISSING) -> None:
        self.file, self.path, self.message, self.value = file, path, message, value
        where = file if file.isprintable() else repr(file)[1:-1]  # a newline in a file name
        text = f"{where}: {path}: {message}" if path else f"{where}: {message}"
        if value is not MISSING:
            shown = shown_value(value)
            text += f", got {shown if len(shown) <= 80 else shown[:77] + '...'}"
        super().__init__(text)


_SHORT = reprlib.Repr()
_SHORT.maxstring = _SHORT.maxother = 200
_SHORT.maxlist = _SHORT.maxtuple = _SHORT.maxdict = 30
_SHORT.maxlevel = 4


def shown_value(value: Any) -> str:
    """A value as a message shows it: a number as the user wrote it (``1_000``, not 1000),
    else its repr, built bounded (reprlib), so a huge value never costs a huge string."""
    source = getattr(value, "source", None)
    if isinstance(source, str):
        return source[:200]
    return _SHORT.repr(value)


class SubmitError(Exception):
    """Writing or submitting failed, or a step on the machine; str() is one line for the CLI."""


@dataclass(frozen=True)
class Bind:
    source: str
    target: str
    read_only: bool = False


@dataclass(frozen=True)
class Requeue:
    """job.requeue: checkpoint on a signal before the time limit (or a preemption), then
    requeue (launcher.features.requeue; the program's side: torchrun_jsc_kit.requeue)."""

    signal: str = "USR2"  # without SIG; USR1 is left to NCCL
    before: int = 120  # seconds before the time limit (#SBATCH --signal=B:SIG@before)
    max: int = 3  # requeues at most (SLURM_RESTART_COUNT, psslurm: SLURM_JOB_RESTART_COUNT)


@dataclass(frozen=True)
class Job:
    name: str
    nodes: int
    time: Optional[str] = None
    partition: Optional[str] = None
    account: Optional[str] = None
    cpus_per_task: Optional[int] = None
    gpus_per_node: int = 0
    output: str = "%x-%j.out"
    error: Optional[str] = None
    node_output: Optional[str] = "logs/%x-%j.node%n.out"
    sbatch: Tuple[Tuple[str, Optional[str]], ...] = ()
    sbatch_off: Tuple[str, ...] = ()  # options the spec switched off (`false`)
    requeue: Optional[Requeue] = None
    spare_nodes: int = 0  # beyond `nodes`, waiting (launcher.features.spare)
    heartbeat_timeout: int = 60  # s: a node silent this long is lost (features.spare: why 60)
    arch: Optional[str] = None  # the partition's: x86_64 | aarch64 (check --image compares)


@dataclass(frozen=True)
class Horovod:
    """Horovod built from source in the venv against the site's NCCL."""

    nccl_home: str
    package: str = "horovod[pytorch]"


@dataclass(frozen=True)
class VenvBuild:
    """How `jsc-compose venv` builds site.venv on a compute node (launcher.render.venvjob)."""

    requirements: Optional[str] = None  # None: requirements.txt beside the spec
    pip_options: Tuple[str, ...] = ()  # e.g. --no-index --find-links /p/wheels
    horovod: Optional[Horovod] = None


@dataclass(frozen=True)
class SuffixRule:
    """A site's inter-node names, chosen on the first node at run time (features.site):
    the suffix listed for $SYSTEMNAME; where SYSTEMNAME is unset or not listed, the first
    candidate (in this order) with which the first node's name resolves."""

    systems: Tuple[Tuple[str, str], ...]  # (SYSTEMNAME, suffix), in the order tried

    @property
    def candidates(self) -> Tuple[str, ...]:
        """Every suffix once, in the order of ``systems``."""
        return tuple(dict.fromkeys(suffix for _, suffix in self.systems))

    @property
    def groups(self) -> Tuple[Tuple[Tuple[str, ...], str], ...]:
        """(the systems, their suffix) for each candidate, in order."""
        return tuple((tuple(n for n, s in self.systems if s == suffix), suffix)
                     for suffix in self.candidates)


@dataclass(frozen=True)
class FastInterface:
    """No inter-node name given: the first node finds its fast interface when the job starts
    (launcher/node/net/fast.py) and the rendezvous names that interface's address where the
    node's name resolves to another one (a management network), else the name. The other
    nodes keep their names (suffix "")."""


@dataclass(frozen=True)
class Site:
    profile: str
    # node name + this = its inter-node name: a fixed suffix, the profile's run-time rule, or
    # the first node's fast interface (FastInterface: site generic without hostname_suffix)
    hostname_suffix: Union[str, SuffixRule, FastInterface] = ""
    socket_ifname: Optional[str] = None
    modules: Tuple[str, ...] = ()
    venv: Optional[str] = None
    env: Tuple[Tuple[str, str], ...] = ()  # exported by every job, e.g. NCCL_IB_GID_INDEX
    venv_build: VenvBuild = VenvBuild()
    # Names in env that are the profile's defaults: exported only when the job's environment
    # (a module, the submit environment) has no value for them: NAME="${NAME:-value}".
    env_defaults: Tuple[str, ...] = ()
    module_purge: bool = False  # `module purge` before `module load` (only with modules)
    mpi_plugin: str = "pmix"  # launch.mpi_plugin's default under this profile


@dataclass(frozen=True)
class Env:
    values: Tuple[Tuple[str, str], ...] = ()
    passthrough: Tuple[str, ...] = ()
    # NAME -> entries joined with ':' around the value NAME has at run time (if set).
    prepend: Tuple[Tuple[str, Tuple[str, ...]], ...] = ()
    append: Tuple[Tuple[str, Tuple[str, ...]], ...] = ()

    @property
    def names(self) -> Tuple[str, ...]:
        """Every name the spec exports (set, prepend, append), sorted."""
        edited = {n for n, _ in self.values} | {n for n, _ in self.prepend + self.append}
        return tuple(sorted(edited))


@dataclass(frozen=True)
class Runtime:
    kind: RuntimeKind
    image: Optional[str] = None
    binds: Tuple[Bind, ...] = ()
    bind_cwd: bool = True
    nv: Optional[bool] = None  # None: --nv exactly when GPUs are requested
    cache_dir: Optional[str] = None
    container_name: Optional[str] = None
    data_path: Optional[str] = None  # enroot: placeholders {user}, {uid}, {job_id} allowed
    writable: bool = False  # enroot: a per-job writable copy instead of the shared read-only one
    keep_old: int = 1  # enroot: containers of older images kept per node and user
    stage: Optional[str] = None  # the node-local directory the image is staged to; None: off


@dataclass(frozen=True)
class Preflight:
    """launch.preflight: the doctor's checks before the launch (launcher.features.preflight)."""

    fake_gpus: bool = False  # the lab's fake GRES: count CUDA_VISIBLE_DEVICES, no device files


@dataclass(frozen=True)
class Launch:
    mode: str  # a name in launcher.modes.MODES
    procs_per_node: int
    command: Tuple[str, ...] = ()  # argv of the per-node launcher (modes that have one)
    rdzv_port: Optional[int] = None
    preflight: Optional[Preflight] = None
    hang_timeout: Optional[int] = None  # seconds without progress: end the job (features.hangs)
    # What the deadline does to the node behind: "end" the job, or "replace" it by a spare
    # (job.spare_nodes; features.hangs, launcher/node/spares.py)
    hang_action: str = "end"
    # The mode's own keys, typed: the frozen dataclass its LaunchMode.options returns (e.g.
    # launcher.modes.horovod.HorovodOptions), None for a mode without options.
    options: Any = None


@dataclass(frozen=True)
class JobSpec:
    source: str
    job: Job
    site: Site
    env: Env
    runtime: Runtime
    launch: Launch
    program: Tuple[str, ...]


# Built-in site profiles: each fact below carries its source; every one can be overridden in
# the spec (docs/reference/spec.md, "site").
#
# JSC (JUWELS, JURECA, JUSUF: Slurm with psslurm instead of slurmd; the inter-node names
# also on JUPITER and JEDI):
# - hostname_suffix, chosen per system on the first node at run time (JSC_SUFFIXES): nodes
#   reach each other through their fast-network names, which differ between systems.
#   JUWELS Cluster and Booster, JURECA-DC, JUSUF: `<node>i` (the InfiniBand names); public
#   JSC scripts add `i` exactly when $SYSTEMNAME is juwels, juwelsbooster, jurecadc or jusuf
#   (interTwin-eu/itwinai src/itwinai/slurm/system-base-scripts/juwels.sh).
#   JUPITER: `<node>-interconnect-1.jupiter.internal`; the plain name's management address
#   (10.128.x.x) "is not bindable" (OpenEuroLLM/titan-oellm slurm/jupiter.sh). JEDI has
#   JUPITER's node design (JSC's JUPITER configuration page). Uncertain (no source confirmed):
#   SYSTEMNAME `jupiter` (a public JSC platform script matches `jupiter` in
#   /etc/FZJ/systemname) and `jedi`, and JEDI's interconnect names. Hence the fallback:
#   where SYSTEMNAME is unset or another value, the first candidate that resolves wins (`i`
#   first: the kit's name since its start, answered from /etc/hosts in the lab), and a name
#   that does not resolve stops the job in one line naming every candidate tried.
#   The socket interface is left unset on purpose: torchrun_jsc picks the one that routes to
#   the endpoint. Override: site.hostname_suffix (a fixed suffix, no run-time choice).
# - mpi_plugin "pspmix": psslurm serves PMIx to a step only when PSSLURM_PMI_TYPE=pmix, which
#   ParaStation's srun-side plugin sets for --mpi=pspmix; SLURM_MPI_TYPE=pmix (--mpi=pmix) is
#   ignored, so every rank would start as an MPI singleton. Sources: ParaStation/psmgmt
#   plugins/psslurm/src/psslurm/psslurmenv.c getPMIType(), plugins/pspmix/slurm/mpi_pspmix.c
#   (setenvf(env, "PSSLURM_PMI_TYPE", "pmix")). Override: launch.mpi_plugin.
# - module_purge: start site.modules from a clean module environment (`module purge`, then
#   the Stage and its modules), as JSC's user guidance does and as launcher.render.venvjob builds the
#   venv, so that the run job loads the set the venv was built with, not that plus whatever
#   the submit shell had loaded. Override: site.module_purge.
# - env defaults against InfiniBand retry timeouts under DragonFly+ congestion, as public
#   JUWELS Booster recipes set them: NCCL_IB_TIMEOUT=50, NCCL_IB_RETRY_CNT=10 (NCCL,
#   docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html) and UCX_RC_TIMEOUT=4s (UCX).
#   Exported only where the job's environment (a site module) has no value; site.env or
#   env.set override them.
# - GH200 (JUPITER, JEDI): NCCL_PROTO=^LL128 in each task on aarch64 nodes, as under cray-ex
#   (below), set by launcher/task/hook.sh for every profile: the corruption is in GH200's
#   NIC-to-GPU path over PCIe->NVLink-C2C, whatever the fabric (NVIDIA/nccl#2053).
JSC_ENV_DEFAULTS = (("NCCL_IB_RETRY_CNT", "10"), ("NCCL_IB_TIMEOUT", "50"),
                    ("UCX_RC_TIMEOUT", "4s"))
JUPITER_INTERCONNECT = "-interconnect-1.jupiter.internal"
JSC_SUFFIXES = SuffixRule((("juwels", "i"), ("juwelsbooster", "i"), ("jurecadc", "i"),
                           ("jusuf", "i"), ("jupiter", JUPITER_INTERCONNECT),
                           ("jedi", JUPITER_INTERCONNECT)))
# HPE Cray EX with Slingshot (LUMI, Alps, Perlmutter, Isambard-AI, Olivia): nodes `nidNNNNNN`
# with four NICs hsn0-hsn3; the nid name may resolve to every hsn address or to the
# management network (`-nmn`): the generic fast-interface rule, which counts hsn* as fast
# (Cray-HPE/docs-csm#4513). Defaults, exported where the job's environment has no value:
# - NCCL_SOCKET_IFNAME=hsn: NCCL's sockets over every NIC (NCCL's prefix form), as LUMI's
#   workshop scripts ("to workaround RCCL failing to auto-detect the correct interface") and
#   HPE's list (hsn0,hsn1,hsn2,hsn3) set it; gloo keeps the one interface that reaches the
#   rendezvous (the task scripts' rule).
# - libfabric/CXI and NCCL settings HPE recommends for NCCL over Slingshot
#   (HewlettPackard/shs-ccl-docs ccl_env.sh, as Sigma2's Olivia documentation lists them in
#   May 2026): FI_MR_CACHE_MONITOR=userfaultfd, FI_CXI_DISABLE_HOST_REGISTER=1,
#   FI_CXI_DEFAULT_CQ_SIZE=131072, FI_CXI_DEFAULT_TX_SIZE=2048, FI_CXI_RDZV_PROTO=alt_read,
#   FI_CXI_RDZV_EAGER_SIZE/THRESHOLD/GET_MIN=0, FI_CXI_RX_MATCH_MODE=hybrid, NCCL_CROSS_NIC=1,
#   NCCL_NET_GDR_LEVEL=PHB.
# - TORCHRUN_JSC_OFI_NCCL=1: what only the node can tell, decided in each task's container
#   (launcher/task/nccl-net.sh, sourced by hook.sh): NCCL_NET="AWS Libfabric" (every
#   aws-ofi-nccl release's name; OFI only from 1.12) where the net plugin is
#   found as NCCL looks for it (NCCL_NET_PLUGIN, libnccl-net.so; RCCL's librccl-net.so), so a
#   plugin that fails to load fails loudly instead of falling back to TCP, else one line
#   saying NCCL between nodes runs over TCP sockets; and NCCL_PROTO=^LL128 on aarch64 (Grace:
#   GH200, GB200) only, where LL128 corrupts data (NVIDIA/nccl#2001; CSCS's and HPE's
#   settings for GH200).
CRAY_EX_ENV_DEFAULTS = (
    ("FI_CXI_DEFAULT_CQ_SIZE", "131072"), ("FI_CXI_DEFAULT_TX_SIZE", "2048"),
    ("FI_CXI_DISABLE_HOST_REGISTER", "1"), ("FI_CXI_RDZV_EAGER_SIZE", "0"),
    ("FI_CXI_RDZV_GET_MIN", "0"), ("FI_CXI_RDZV_PROTO", "alt_read"),
    ("FI_CXI_RDZV_THRESHOLD", "0"), ("FI_CXI_RX_MATCH_MODE", "hybrid"),
    ("FI_MR_CACHE_MONITOR", "userfaultfd"), ("NCCL_CROSS_NIC", "1"),
    ("NCCL_NET_GDR_LEVEL", "PHB"), ("NCCL_SOCKET_IFNAME", "hsn"), ("TORCHRUN_JSC_OFI_NCCL", "1"))
SITE_PROFILES = {
    "jsc": Site("jsc", hostname_suffix=JSC_SUFFIXES, env=JSC_ENV_DEFAULTS,
                env_defaults=tuple(n for n, _ in JSC_ENV_DEFAULTS), module_purge=True,
                mpi_plugin="pspmix"),
    # No site facts: the first node's fast interface (InfiniBand, Slingshot hsn*, or the one
    # site.socket_ifname names) where its name resolves to another network.
    "generic": Site("generic", hostname_suffix=FastInterface()),
    "cray-ex": Site("cray-ex", hostname_suffix=FastInterface(), env=CRAY_EX_ENV_DEFAULTS,
                    env_defaults=tuple(n for n, _ in CRAY_EX_ENV_DEFAULTS)),
}

