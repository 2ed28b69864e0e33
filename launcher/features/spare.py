"""Feature spare: ``job.spare_nodes: K``: K nodes more in the allocation, waiting without
joining the training; a lost training node is found by heartbeat and a spare takes its place
in the same job (docs/guide/spare-nodes.md).

Where it sits: spec (:meth:`SpareFeature.load_job`, :meth:`SpareFeature.load_launch`) ->
**spare** -> the job plan (``#SBATCH --no-kill``, the node list's split, the launch as one
step per training node under the supervisor) -> text. Pure: the lines call the kit's own
code (launcher/node/job.sh ``jsc_spare_nodes``, ``jsc_spares_launch``; launcher/node/spares.py).

- ``sbatch --nodes`` is job.nodes + K (launcher.plan decides it: :func:`allocated_nodes`), with
  ``--no-kill``: Slurm then ends only a lost node's step, not the job.
- At batch scope ``jsc_spare_nodes N`` splits the allocation's nodes: the first N train (the
  first of them is the batch host: the supervisor and the rendezvous store run there), the
  others wait; ``$ntrain`` is torchrun's ``--nnodes``, ``$nnodes`` stays the allocation's (the
  runtime's per-node set-up reaches the spares too).
- The launch: ``jsc_spares_launch TIMEOUT srun --nodes=1 ...``: one step per training node
  (the supervisor names the node), each task ``python3 -I "$kit/node/run.py" spares beat --``
  before the runtime and the agent: a heartbeat to the batch host every second. TIMEOUT is
  ``job.heartbeat_timeout`` (60 s: longer than the InfiniBand trouble NCCL rides out itself).
- Only launch mode torchrun recovers in place (its per-node agent re-rendezvouses); the other
  modes refuse the key in one line: they recover by job.requeue only.
- ``launch.max_restarts`` defaults to K with spares: an agent whose workers failed on a dead
  peer before it saw the membership change restarts them instead of giving up.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, List, Mapping, Tuple

from launcher import kit
from launcher.features.base import Context, Feature, SbatchOption
from launcher.model import Job, JobSpec, Launch
from launcher.modes import LaunchMode, Step
from launcher.modes.common import NNODES
from launcher.shell import Raw, Statement, Token, Var, Word, word
from launcher.slurm import MAX_NODES
from launcher.yamlread import Key, Reader

KEYS = (
    Key(("job.spare_nodes",),
        "int, 0",
        "nodes allocated beyond `job.nodes` that wait without joining; one takes the place "
        "of a training node whose heartbeat stopped, in the same job "
        "([spare nodes](../guide/spare-nodes.md)); launch mode `torchrun` only; writes "
        "`--nodes=nodes+spare_nodes --no-kill`"),
    Key(("job.heartbeat_timeout",),
        "int seconds, 60",
        "with `job.spare_nodes`: a training node whose heartbeat (once a second over the "
        "fabric) stopped this long is silent; after Slurm is asked about it, it is replaced by "
        "a spare. Longer than the fabric trouble NCCL rides out by itself (InfiniBand retries: "
        "about 30 s with NCCL's defaults), so that a blip replaces nothing; every training "
        "node waits 3 times as long plus 4 to 60 s for the batch host's answers before it "
        "requeues or ends the job ([spare nodes](../guide/spare-nodes.md#the-heartbeat))"),
)
# A training node silent this long is lost (launcher/node/spares.py). NCCL over InfiniBand
# retries a dead link for 4.096 us x 2^NCCL_IB_TIMEOUT x NCCL_IB_RETRY_CNT: with NCCL's defaults
# (20, 7) about 30 s, which a subnet manager sweep or a switch reboot may use up; the heartbeat
# must not give up first. JSC's recipes raise the retries (NCCL_IB_RETRY_CNT=10). The value
# itself is the model's default (launcher.model.Job.heartbeat_timeout).
HEARTBEAT_TIMEOUT_S: int = Job.heartbeat_timeout
NTRAIN = Var("ntrain")  # set by jsc_spare_nodes: the training nodes, torchrun's --nnodes
# Set by the supervisor for each step (launcher/node/spares.py): read by the agent inside
# the container, so Enroot must forward them and pyxis keep them.
TASK_NAMES = ("TORCHRUN_JSC_NODE_RANK", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE")
MODES = ("torchrun",)


def allocated_nodes(job: Job) -> int:
    """``#SBATCH --nodes``: the training nodes and the spares."""
    return job.nodes + job.spare_nodes


def beat_argv() -> List[Token]:
    """What each training node's task starts through: the heartbeat, then the rest."""
    return ["python3", "-I", kit.file("node/run.py"), "spares", "beat", "--"]


def _per_node(token: Token) -> Token:
    """One srun step per node: --nodes=1 for the launch's --nodes=$nnodes; per-node logs
    by node name (%N), as every step's node index (%n) is 0."""
    if token == word("--nodes=", NNODES):
        return "--nodes=1"
    if isinstance(token, str) and token.startswith("--output="):
        return token.replace("%n", "%N")
    return token


def _training(token: Token) -> Token:
    """torchrun's --nnodes is the training nodes', not the allocation's."""
    if isinstance(token, Word) and token == word("--nnodes=", NNODES):
        return word("--nnodes=", NTRAIN)
    return token


def spares_step(step: Step, timeout: int = HEARTBEAT_TIMEOUT_S) -> Step:
    """The launch as the supervisor runs it (launcher/node/job.sh ``jsc_spares_launch``)."""
    starter: Tuple[Token, ...] = ("jsc_spares_launch", str(timeout),
                                  *(_per_node(t) for t in step.starter))
    task = (*beat_argv(), *(_training(t) for t in step.task))
    comment = f"{step.comment}; a step per training node, spares wait (job.spare_nodes)"
    return Step(comment, starter, task)


class SpareFeature(Feature):
    name = "spare"
    keys = KEYS

    def load_job(self, r: Reader, m: Mapping[str, Any], job: Job) -> Job:
        spare = r.integer("job.spare_nodes", m.get("spare_nodes", 0), 0, MAX_NODES)
        if job.nodes + spare > MAX_NODES:
            raise r.fail("job.spare_nodes", f"job.nodes ({job.nodes}) + job.spare_nodes is "
                         f"{job.nodes + spare} nodes, over the limit of {MAX_NODES}", spare)
        if "heartbeat_timeout" not in m:
            return replace(job, spare_nodes=spare)
        timeout = r.integer("job.heartbeat_timeout", m["heartbeat_timeout"], 5, 3600)
        if not spare:
            raise r.fail("job.heartbeat_timeout", "is the spare nodes' heartbeat: it needs "
                         "job.spare_nodes >= 1", timeout)
        return replace(job, spare_nodes=spare, heartbeat_timeout=timeout)

    def load_launch(self, r: Reader, m: Mapping[str, Any], job: Job, launch: Launch,
                    mode: LaunchMode) -> Launch:
        if not job.spare_nodes:
            return launch
        if mode.name not in MODES:
            raise r.fail("job.spare_nodes", f"mode {mode.name} has no per-node agent that "
                         "could meet a spare: it recovers from a lost node by job.requeue "
                         "only; spare nodes need launch.mode torchrun", job.spare_nodes)
        if "max_restarts" not in m:
            launch = replace(launch, options=replace(launch.options,
                                                     max_restarts=job.spare_nodes))
        return launch

    def exports(self, spec: JobSpec, purpose: str) -> Tuple[str, ...]:
        return TASK_NAMES if spec.job.spare_nodes else ()

    def sbatch(self, ctx: Context) -> List[SbatchOption]:
        return [("no-kill", None)] if ctx.spec.job.spare_nodes else []

    def geometry(self, ctx: Context) -> List[Statement]:
        job = ctx.spec.job
        if not job.spare_nodes:
            return []
        return [Raw(f"jsc_spare_nodes {job.nodes}  # job.spare_nodes: the first {job.nodes} "
                    f"train, {job.spare_nodes} wait")]

    def launch_step(self, ctx: Context, step: Step) -> Step:
        if not ctx.spec.job.spare_nodes or ctx.purpose == "submitit":
            return step
        return spares_step(step, ctx.spec.job.heartbeat_timeout)


SPARE = SpareFeature()

__all__ = ["HEARTBEAT_TIMEOUT_S", "SPARE", "allocated_nodes", "beat_argv", "spares_step"]
