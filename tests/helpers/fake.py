"""Recording fakes of srun, scontrol, squeue, sbatch, apptainer, enroot, mpirun, torchrun_jsc,
python3, accelerate, deepspeed; a fake getent (hosts) for the batch step's name lookup.

Helper for ring 2: `install(bin_dir, log_dir)` writes one small sh
wrapper per tool into bin_dir that runs this file with the tool's name. Every call appends
a JSON record (argv, selected environment, cwd) to FAKE_LOG. The launchers run the command
they were given, once per simulated task, with that task's Slurm variables, so scope bugs
(a per-task variable expanded at batch scope) and quoting bugs show up in the records.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

TOOLS = ("srun", "scontrol", "squeue", "sbatch", "apptainer", "enroot", "mpirun", "torchrun_jsc",
         "torchrun", "python3", "module", "scancel", "accelerate", "deepspeed")
# Plain sh tools (a Python start each costs time per test run).
SH_TOOLS = {
    # The test's own user, so that the per-user data path (/tmp/enroot-{user}) is the test's.
    "id": """\
case "$*" in
    -un|"-u -n") echo "$FAKE_USER" ;;
    -u) echo "$FAKE_UID" ;;
    *) exec /usr/bin/id "$@" ;;
esac
""",
    # `getent hosts NAME...` as the first node's resolver answers the batch step's lookup of
    # the inter-node name (launcher/features/site.py): the names in FAKE_HOSTS (space-separated)
    # resolve; without FAKE_HOSTS, every name ending in "i" (the JSC names, as the fake
    # network below). Status 2 (glibc's "not found") for the first that does not. Other
    # databases go to the real getent.
    "getent": """\
if [ "$1" != hosts ]; then exec REAL_GETENT "$@"; fi
shift
for name in "$@"; do
    if [ -n "${FAKE_HOSTS+set}" ]; then
        case " $FAKE_HOSTS " in *" $name "*) ;; *) exit 2 ;; esac
    else
        case "$name" in *i) ;; *) exit 2 ;; esac
    fi
    echo "10.0.0.1        $name"
done
""",
}
RECORDED_ENV = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT",
                "SLURM_PROCID", "SLURM_NODEID", "SLURM_LOCALID", "SLURM_NTASKS", "SLURM_JOB_ID",
                "SLURM_JOB_NAME", "SLURM_JOB_NUM_NODES", "HOSTILE", "PLAIN", "NCCL_DEBUG",
                "NCCL_SECRET_TOKEN", "APPTAINER_CACHEDIR", "ENROOT_DATA_PATH", "VIRTUAL_ENV",
                "SRUN_CPUS_PER_TASK", "OMPI_COMM_WORLD_RANK", "GLOO_SOCKET_IFNAME",
                "OMPI_MCA_btl_tcp_if_include", "HOROVOD_GLOO_IFACE", "PMIX_MCA_gds",
                "NCCL_SOCKET_IFNAME", "PATH", "LD_LIBRARY_PATH", "LD_PRELOAD", "HOSTILE_LIST",
                "REQUEUE_SIGNAL", "REQUEUE_MARKER", "TORCHRUN_JSC_FORWARD_SIGNALS",
                "SLURM_RESTART_COUNT", "SLURM_JOB_RESTART_COUNT", "SLURM_CPUS_PER_TASK",
                "NCCL_IB_TIMEOUT", "NCCL_IB_RETRY_CNT", "UCX_RC_TIMEOUT",
                "NVIDIA_DRIVER_CAPABILITIES", "NVIDIA_VISIBLE_DEVICES", "TORCHRUN_JSC_CACHE",
                "XDG_CACHE_HOME", "TRITON_CACHE_DIR", "HF_HOME", "TORCH_HOME", "PIP_CACHE_DIR",
                "IMAGE_ONLY", "PYTHONPATH", "TORCHRUN_JSC_STACKS")


def install(bin_dir: Path, log_dir: Path) -> Dict[str, str]:
    """Write the wrappers; return the environment additions that activate them."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    log_dir.mkdir(parents=True, exist_ok=True)
    sysconf = bin_dir.parent / "etc-enroot"
    for tool in TOOLS:
        path = bin_dir / tool
        # Like Enroot's own script, the fake enroot names its config file in a
        # `config::init "SYSCONFDIR/enroot.conf"` line (never run: after the exec), which the
        # kit's rule for Enroot < 4.0 reads (launcher/runtimes/enroot_scripts.py).
        conf = f'FAKE_ENROOT_CONF="{sysconf}/enroot.conf" ' if tool == "enroot" else ""
        init = f'config::init "{sysconf}/enroot.conf"\n' if tool == "enroot" else ""
        path.write_text(f'#!/bin/sh\n{conf}exec {sys.executable} -I -S '
                        f'{Path(__file__).resolve()} {tool} "$@"\n{init}')
        path.chmod(0o755)
    real_getent = shutil.which("getent") or "/usr/bin/getent"
    for tool, body in SH_TOOLS.items():
        path = bin_dir / tool
        path.write_text("#!/bin/sh\n" + body.replace("REAL_GETENT", real_getent))
        path.chmod(0o755)
    user = f"fake{os.getpid()}x{os.urandom(3).hex()}"
    # The site's Enroot config: a per-user data path under /tmp (tests change or remove it).
    sysconf.mkdir(exist_ok=True)
    (sysconf / "enroot.conf").write_text(f"ENROOT_DATA_PATH /tmp/enroot-{user}/config-data\n")
    # Enroot/pyxis jobs make their cache directory on the node: the test's, not /tmp's.
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_LOG": str(log_dir),
            "TORCHRUN_JSC_CACHE": str(log_dir.parent / "jsc-cache"),
            "FAKE_USER": user, "FAKE_UID": str(4_000_000 + int(user[-6:], 16))}


def enroot_paths(env: Dict[str, str]) -> List[Path]:
    """The per-user Enroot data paths a test's jobs may have made (for the test to remove)."""
    return [Path(f"/tmp/enroot-{env['FAKE_USER']}"), Path(f"/tmp/enroot-{env['FAKE_UID']}")]


def records(log_dir: Path, prog: str = "") -> List[dict]:
    """All records, in call order, optionally only those of one tool."""
    out = [json.loads(p.read_text()) for p in log_dir.glob("*.json")]
    out.sort(key=lambda r: r["seq"])
    return [r for r in out if not prog or r["prog"] == prog]


def _record(prog: str, argv: Sequence[str], extra: Dict[str, object] | None = None) -> None:
    log = Path(os.environ["FAKE_LOG"])
    seq = f"{time.monotonic_ns():020d}-{os.getpid():08d}-{os.urandom(3).hex()}"
    data = {"prog": prog, "argv": list(argv), "cwd": os.getcwd(), "seq": seq,
            "env": {k: os.environ[k] for k in RECORDED_ENV if k in os.environ}}
    data.update(extra or {})
    # Atomically (a temporary name, then rename): a test reading the records while a fake
    # still runs must never see a half-written file.
    tmp = log / f".{seq}.tmp"
    tmp.write_text(json.dumps(data))
    os.replace(tmp, log / f"{seq}.json")


def expand(nodelist: str) -> List[str]:
    hosts: List[str] = []
    for item in re.findall(r"(?:[^,\[]|\[[^\]]*\])+", nodelist):
        m = re.fullmatch(r"([^\[]*)\[(\d+)-(\d+)\]", item)
        if m:
            width = len(m[2])
            hosts += [f"{m[1]}{i:0{width}d}" for i in range(int(m[2]), int(m[3]) + 1)]
        else:
            hosts.append(item)
    return hosts


def _options(argv: Sequence[str], with_value: Tuple[str, ...]) -> Tuple[Dict[str, str], List[str]]:
    """Split leading options from the command; '--opt=v' and '--opt v' forms."""
    opts: Dict[str, str] = {}
    i = 0
    while i < len(argv) and argv[i].startswith("-"):
        key, eq, value = argv[i].partition("=")
        if not eq and key in with_value:
            i += 1
            value = argv[i]
        if key in ("--bind", "-B", "--mount", "-m", "--env", "-e"):  # repeatable
            opts[key] = opts.get(key, "") + value + "\0"
        else:
            opts.setdefault(key, value)
        i += 1
    return opts, list(argv[i:])


def _run_tasks(cmd: List[str], tasks: List[Dict[str, str]]) -> int:
    """Start every task at once (as srun does), wait for all; the first failure wins."""
    procs = [subprocess.Popen(cmd, env=dict(os.environ, **task_env)) for task_env in tasks]
    codes = [p.wait(timeout=120) for p in procs]
    return next((c for c in codes if c), 0)


def step_cpus(opts: Dict[str, str]) -> int:
    """CPUs per task by srun's contract since Slurm 23.11: --cpus-per-task/-c on the command
    line, else SLURM_CPUS_PER_TASK, else 1. SRUN_CPUS_PER_TASK (read by 22.05 and 23.02 only)
    is ignored."""
    text = opts.get("--cpus-per-task") or opts.get("-c") \
        or os.environ.get("SLURM_CPUS_PER_TASK") or "1"
    return int(text)


def node_cpus(opts: Dict[str, str]) -> int:
    """CPUs a step may use per node: the smallest node's SLURM_JOB_CPUS_PER_NODE; with
    --hint=nomultithread or --threads-per-core=1 (options or SLURM_HINT/SLURM_THREADS_PER_CORE)
    one per core, FAKE_THREADS_PER_CORE (default 1) hardware threads each."""
    counts = [int(c.split("(")[0]) for c in
              os.environ.get("SLURM_JOB_CPUS_PER_NODE", "48").split(",")]
    hint = opts.get("--hint", os.environ.get("SLURM_HINT", ""))
    threads = opts.get("--threads-per-core", os.environ.get("SLURM_THREADS_PER_CORE", ""))
    if "nomultithread" in hint or threads == "1":
        return min(counts) // int(os.environ.get("FAKE_THREADS_PER_CORE", "1"))
    return min(counts)


def srun(argv: List[str]) -> int:
    opts, cmd = _options(argv, ("-N", "-n", "--mpi", "--output", "--error", "-c",
                                "--cpus-per-task"))
    nodes = int(opts.get("--nodes", os.environ.get("SLURM_JOB_NUM_NODES", "1")))
    # Without the option srun takes the batch job's (sbatch exports SLURM_NTASKS_PER_NODE).
    per_node = int(opts.get("--ntasks-per-node", os.environ.get("SLURM_NTASKS_PER_NODE", "1")))
    cpus = step_cpus(opts)
    _record("srun", argv, {"cpus": cpus})
    if cpus * per_node > node_cpus(opts):
        print(f"srun: error: Unable to create step for job {os.environ.get('SLURM_JOB_ID')}: "
              "More processors requested than permitted", file=sys.stderr)
        return 1
    names = expand(os.environ.get("SLURM_JOB_NODELIST", "node[1-9]"))
    tasks = [{"SLURM_NODEID": str(n), "SLURM_PROCID": str(n * per_node + l),
              "SLURM_LOCALID": str(l), "SLURM_NTASKS": str(nodes * per_node),
              "SLURMD_NODENAME": names[n % len(names)], "SLURM_STEP_NUM_TASKS": str(nodes * per_node),
              "SLURM_CPUS_PER_TASK": str(cpus)}
             for n in range(nodes) for l in range(per_node)]
    if "--container-image" in opts or "--container-name" in opts:
        tasks = [pyxis_env(task, opts) for task in tasks]
    return _run_tasks(cmd, tasks)


def image_env() -> Dict[str, str]:
    """The image's own environment (its ENV, as FAKE_IMAGE_ENV in JSON, e.g. an image that
    sets PYTHONPATH), which each fake runtime applies as the real one does: apptainer and
    pyxis over the task's values, enroot under the names it forwards."""
    return json.loads(os.environ.get("FAKE_IMAGE_ENV", "{}"))


def pyxis_env(task: Dict[str, str], opts: Dict[str, str]) -> Dict[str, str]:
    """pyxis imports the started container's environment into the task, overwriting, except
    the names given with --container-env (comma-separated) that the task has: those keep the
    task's value (pyxis: "names of environment variables to override with the host
    environment"). That container environment is the image's (FAKE_IMAGE_ENV) and what
    Enroot's hooks add (FAKE_PYXIS_ENV, JSON), e.g. its 50-slurm-pytorch.sh for an image with
    PYTORCH_VERSION."""
    keep = set(opts.get("--container-env", "").split(","))
    out = dict(task)
    container = dict(image_env(), **json.loads(os.environ.get("FAKE_PYXIS_ENV", "{}")))
    for name, value in container.items():
        if name in keep and (name in task or name in os.environ):
            continue
        out[name] = value
    return out


def mpirun(argv: List[str]) -> int:
    opts, cmd = _options(argv, ("-np", "--map-by", "--bind-to"))
    _record("mpirun", argv)
    count = int(opts["-np"])
    per_node = int(opts.get("--map-by", "ppr:1:node").split(":")[1])
    tasks = [{"OMPI_COMM_WORLD_RANK": str(r), "OMPI_COMM_WORLD_LOCAL_RANK": str(r % per_node),
              "OMPI_COMM_WORLD_SIZE": str(count)} for r in range(count)]
    return _run_tasks(cmd, tasks)


def scontrol(argv: List[str]) -> int:
    _record("scontrol", argv)
    if argv[:1] == ["requeue"]:
        if os.environ.get("FAKE_REQUEUE_REFUSED"):  # a site that disables requeueing
            print("Requeue of JobId=4242 not allowed: Requested operation is presently disabled",
                  file=sys.stderr)
            return 1
        return 0
    if argv[:2] == ["show", "job"] and os.environ.get("FAKE_PREEMPTED"):  # in the grace time
        print(f"JobId={argv[2]} JobName=t\n   Requeue=1 Restarts=0 BatchFlag=1\n"
              f"   PreemptEligibleTime=2026-11-25T23:20:59 PreemptTime=2026-11-25T23:21:03\n"
              f"   Command=/home/u/t.job")
        return 0
    if argv[:2] == ["show", "partition"] and os.environ.get("FAKE_PREEMPTED"):
        print(f"PartitionName={argv[2]}\n   PriorityTier=1 PreemptMode={os.environ['FAKE_PREEMPTED']}")
        return 0
    if argv[:2] == ["show", "node"]:  # what the kit reads of it
        threads = os.environ.get("FAKE_THREADS_PER_CORE", "1")
        print(f"NodeName={argv[2] if len(argv) > 2 else 'jwb0001'} Arch=x86_64 CoresPerSocket=24\n"
              f"   CPUAlloc=0 CPUEfctv=96 CPUTot=96 CPULoad=0.00\n"
              f"   Sockets=2 Boards=1 ThreadsPerCore={threads}")
        return 0
    if argv[:2] == ["show", "hostnames"]:
        print("\n".join(expand(argv[2] if len(argv) > 2 else os.environ["SLURM_JOB_NODELIST"])))
        return 0
    return 1


def apptainer(argv: List[str]) -> int:
    _record("apptainer", argv)
    if argv[:1] != ["exec"]:
        return 1
    opts, rest = _options(argv[1:], ("--bind", "-B"))
    image, cmd = rest[0], rest[1:]
    if not Path(image).exists():
        print(f"FATAL: could not open image {image}", file=sys.stderr)
        return 255
    # Like Apptainer: the host's environment, where the image's own (ENV, %environment) wins.
    return subprocess.run(cmd, env=dict(os.environ, **image_env()), check=False).returncode


def enroot_data_path() -> str:
    """Enroot's data path as enroot.in computes it (NVIDIA/enroot, "BEGIN CONFIG"): a non-empty
    ENROOT_DATA_PATH in the environment; else the first ENROOT_DATA_PATH line of enroot.conf,
    then of enroot.conf.d/*.conf (a set value is never overwritten), $VAR expanded; else
    ${XDG_DATA_HOME:-$HOME/.local/share}/enroot. The fake's enroot.conf is FAKE_ENROOT_CONF."""
    if os.environ.get("ENROOT_DATA_PATH"):
        return os.environ["ENROOT_DATA_PATH"]
    conf = Path(os.environ["FAKE_ENROOT_CONF"])
    for file in [conf] + sorted(Path(f"{conf}.d").glob("*.conf")):
        if not file.is_file():
            continue
        for line in file.read_text().splitlines():
            key, _, value = line.strip().partition(" ") if " " in line.strip() \
                else line.strip().partition("=")
            if key == "ENROOT_DATA_PATH" and value.strip(" \t="):
                return os.path.expandvars(value.strip(" \t="))
    home = os.environ.get("XDG_DATA_HOME") or os.environ["HOME"] + "/.local/share"
    return home + "/enroot"


def enroot(argv: List[str]) -> int:
    """Like Enroot 4.1 (FAKE_ENROOT_VERSION: another, 3.x without `enroot info`): containers
    are directories of the data path, listed (ls -1, dot names hidden) while `create` still
    extracts, so a kill mid-create leaves a partial tree."""
    # Without ENROOT_DATA_PATH (the kit's default; pyxis drops it) Enroot's config names it.
    data = Path(enroot_data_path())
    version = os.environ.get("FAKE_ENROOT_VERSION", "4.1.2")
    _record("enroot", argv, {"data": str(data)})
    if argv[:1] == ["info"] and not version.startswith(("1.", "2.", "3.")):
        print(f"Enroot version: {version}\nConfig file: {os.environ['FAKE_ENROOT_CONF']}\n\n"
              f"Environment variables:\n  ENROOT_DATA_PATH={data}")
        return 0
    if argv[:1] == ["list"]:
        if data.is_dir():
            print("\n".join(sorted(p.name for p in data.iterdir() if not p.name.startswith("."))))
        return 0
    if argv[:2] == ["remove", "-f"]:
        for name in argv[2:]:
            shutil.rmtree(data / name, ignore_errors=True)
        return 0
    if argv[:1] == ["create"]:
        opts, rest = _options(argv[1:], ("--name", "-n"))
        rest = rest[1:] if rest[:1] == ["--"] else rest
        target = data / opts["--name"]
        if target.exists():
            print(f"[ERROR] File already exists: {target}", file=sys.stderr)
            return 1
        if not Path(rest[0]).is_file():
            print(f"[ERROR] No such file or directory: {rest[0]}", file=sys.stderr)
            return 1
        target.mkdir(parents=True)
        time.sleep(float(os.environ.get("FAKE_ENROOT_CREATE_S", "0")))
        (target / "etc").mkdir()  # the last thing extracted: a complete tree has it
        return 0
    if argv[:1] == ["start"]:
        opts, rest = _options(argv[1:], ("--mount", "--env", "-m", "-e", "--rc"))
        name, cmd = rest[0], rest[1:]
        if not (data / name / "etc").is_dir():
            print(f"[ERROR] No such file or directory: {data / name}", file=sys.stderr)
            return 1
        rc = opts.get("--rc")
        if rc is not None and not Path(rc).is_file():
            print(f"[ERROR] No such file or directory: {rc}", file=sys.stderr)
            return 1
        # Like Enroot: the container sees the image's environment and the variables named
        # with --env over it (a name that is not set arrives set to the empty string).
        env = {k: os.environ[k] for k in ("PATH", "FAKE_LOG", "FAKE_ENROOT_DATA",
                                          "FAKE_PROGRAM_RC", "FAKE_PROGRAM") if k in os.environ}
        env.update(image_env())
        for item in opts.get("--env", "").split("\0"):
            if item:
                env[item] = os.environ.get(item, "")
        # No root filesystem of its own: paths under the container's / that the kit's
        # scripts name as arguments (the pyxis set-up's marker) point into the tree.
        cmd = [str(data / name / a[1:]) if a.startswith("/.torchrun-jsc") else a for a in cmd]
        # --rc: the command script runs with the command as its arguments (Enroot's
        # enroot-switchroot: `sh RC COMMAND...`).
        return subprocess.run((["sh", rc] if rc else []) + cmd, env=env, check=False).returncode
    return 1


def sbatch(argv: List[str]) -> int:
    """Parse #SBATCH lines like sbatch does and run the script synchronously."""
    _record("sbatch", argv)
    opts, rest = _options(argv, ())
    script = rest[0]
    options = dict(parse_sbatch_lines(Path(script).read_text(encoding="utf-8")))
    nodes = int(options.get("--nodes", "1"))
    env = dict(os.environ, SLURM_JOB_ID="4242", SLURM_JOB_NAME=options.get("--job-name", ""),
               SLURM_JOB_NUM_NODES=str(nodes), SLURM_JOB_NODELIST=f"jwb[0001-{nodes:04d}]",
               SLURM_JOB_CPUS_PER_NODE=f"48(x{nodes})", SLURM_SUBMIT_DIR=os.getcwd())
    with open(Path(os.environ["FAKE_LOG"]) / "job-4242.out", "wb") as out:  # like --output
        done = subprocess.run(["bash", script], env=env, stdout=out, stderr=subprocess.STDOUT,
                              check=False)
    _record("sbatch-done", [script], {"rc": done.returncode, "options": options})
    print("4242" if "--parsable" in opts else "Submitted batch job 4242")
    return 0


def parse_sbatch_lines(text: str) -> List[Tuple[str, str]]:
    """#SBATCH options as sbatch reads them (src/sbatch/opt.c: _get_argument)."""
    out = []
    for line in text.splitlines()[1:]:
        if not line.startswith("#SBATCH"):
            if line.strip() and not line.startswith("#"):
                break  # sbatch stops at the first command
            continue
        arg = _slurm_argument(line[len("#SBATCH"):])
        key, _, value = arg.partition("=")
        out.append((key, value))
    return out


def _slurm_argument(line: str) -> str:
    i, out, quoted, q_char, escape = 0, [], False, "", False
    while i < len(line) and line[i].isspace():
        i += 1
    while i < len(line) and (quoted or not line[i].isspace()):
        c = line[i]
        i += 1
        if escape:
            escape = False
        elif c == "\\":
            escape = True
            continue
        elif quoted:
            if c == q_char:
                quoted = False
                continue
        elif c in "\"'":
            quoted, q_char = True, c
            continue
        elif c == "#":
            break
        out.append(c)
    return "".join(out)


# The fake cluster network, as the shipped interface rule sees it: names ending in "i" (the
# JSC inter-node names), or those in FAKE_HOSTS where set (as the fake getent), resolve to
# 10.0.0.1, or as FAKE_GETENT says (loopback_first: Debian 127.0.1.1 first; dual: AAAA
# fd00::1 first, then A; v6only), FAKE_GETENT_FAIL: nothing does (in the tasks; the batch
# step's getent still answers).
# Node 0 (SLURM_NODEID) owns 10.0.0.1 on ib0 and fd00::1 on ib6; the others reach them from
# 10.0.0.2 (ib0) and fd00::2 (ib6).
FAKE_ADDRESSES = {"": ("10.0.0.1",), "loopback_first": ("127.0.1.1", "10.0.0.1"),
                  "dual": ("fd00::1", "10.0.0.1"), "v6only": ("fd00::1",)}


def is_net_rule(argv: List[str]) -> bool:
    """The task scripts' interface step: `python3 -I KIT/node/run.py net-env [--mpi]
    MASTER_ADDR` (launcher/node/task.sh)."""
    return len(argv) > 2 and argv[0] == "-I" and argv[1].endswith("/node/run.py") \
        and argv[2] == "net-env"


def net_rule(argv: List[str]) -> int:
    """Run the kit's rule itself (launcher/node/net/probe.py, the module the task script's
    run.py runs), its three touches of the network (getaddrinfo, the interface list, the UDP
    source address) answered by the fake network above."""
    _record("python3-net", argv[3:], {"run": argv[1]})
    node0 = os.environ.get("SLURM_NODEID") == "0"
    names = {"127.0.0.1": "lo", "10.0.0.1" if node0 else "10.0.0.2": "ib0",
             "fd00::1" if node0 else "fd00::2": "ib6"}

    def getaddrinfo(host: str, port: object, *args: object, **kwargs: object) -> list:
        hosts = os.environ.get("FAKE_HOSTS")
        known = host.endswith("i") if hosts is None else host in hosts.split()
        if not known or os.environ.get("FAKE_GETENT_FAIL"):
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [(socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 6, "",
                 (a, port)) for a in FAKE_ADDRESSES[os.environ.get("FAKE_GETENT", "")]]

    def source_address(addr: str, port: int) -> str:
        if addr.startswith("127."):
            return "127.0.0.1"
        return addr if node0 else ("fd00::2" if ":" in addr else "10.0.0.2")

    # The kit's module, loaded as the task script's run.py loads it: the package beside it.
    run_py = importlib.util.spec_from_file_location("jsc_kit_node_run", argv[1])
    run = importlib.util.module_from_spec(run_py)
    run_py.loader.exec_module(run)  # type: ignore[union-attr]
    run.load_kit()
    from launcher.node.net import probe

    socket.getaddrinfo = getaddrinfo  # this process runs the rule and nothing else
    probe.interface_addresses = lambda: dict(names)  # type: ignore[assignment]
    probe.source_address = source_address  # type: ignore[assignment]
    return probe.task_env_main(argv[3:])


def is_kit_check(argv: List[str]) -> bool:
    """The batch script's own node-side steps that only decide or check (launcher/node/job.sh
    jsc_endpoint, jsc_image_arch): `python3 -I KIT/node/run.py endpoint|image-arch ...`."""
    return len(argv) > 2 and argv[0] == "-I" and argv[1].endswith("/node/run.py") \
        and argv[2] in ("endpoint", "image-arch")


def kit_program(argv: List[str]) -> bool:
    """`python3 KIT/task/run.py COMMAND ARGS`: the kit's torchrun_jsc or Ray agent."""
    return len(argv) > 1 and argv[0].endswith("/task/run.py")


def recorder(prog: str, argv: List[str]) -> int:
    """torchrun_jsc/torchrun/python3: record, then (torchrun) run the program once."""
    if prog == "python3" and is_net_rule(argv):
        return net_rule(argv)
    if prog == "python3" and is_kit_check(argv):  # the kit's real code, recorded apart
        _record("python3-kit", argv[2:], {"run": argv[1]})
        return subprocess.run([sys.executable, *argv], check=False).returncode
    extra: Dict[str, object] = {}
    if prog == "python3" and kit_program(argv):  # recorded as the command it runs
        prog, argv, extra = argv[1], argv[2:], {"run": argv[0]}  # "run": KIT/task/run.py
    _record(prog, argv, extra)
    flag = next((f for f in ("--no_python", "--no-python") if f in argv), None)
    if prog.startswith("torchrun") and flag:
        cmd = argv[argv.index(flag) + 1:]
        env = dict(os.environ, RANK="0", LOCAL_RANK="0")
        return subprocess.run(cmd, env=env, check=False).returncode
    return _program() if prog == "python3" else int(os.environ.get("FAKE_PROGRAM_RC", "0"))


# The per-node option each launcher gets last, after which the program's argv starts.
_LAST_OPTION = {"accelerate": "--machine_rank", "deepspeed": "--node_rank"}


def per_node_launcher(prog: str, argv: List[str]) -> int:
    """accelerate/deepspeed: record argv and the per-job file's text (config, hostfile), then
    run the program once, after the launcher's last per-node option and its value."""
    path_option = "--config_file" if prog == "accelerate" else "--hostfile"
    path = argv[argv.index(path_option) + 1] if path_option in argv else ""
    text = Path(path).read_text() if path and Path(path).is_file() else None
    _record(prog, argv, {"file": text, "accelerate_use_cpu":
                         os.environ.get("ACCELERATE_USE_CPU")})
    cmd = argv[argv.index(_LAST_OPTION[prog]) + 2:]
    env = dict(os.environ, RANK="0", LOCAL_RANK="0")
    return subprocess.run(cmd, env=env, check=False).returncode


def _program() -> int:
    """The program's side of job.requeue, as FAKE_PROGRAM says: 'stop' checkpoints at once,
    'wait_signal' only after the trap's scancel --signal (FAKE_LOG/scancel.signal)."""
    mode = os.environ.get("FAKE_PROGRAM", "")
    if mode == "wait_signal":
        flag = Path(os.environ["FAKE_LOG"]) / "scancel.signal"
        deadline = time.monotonic() + 30
        while not flag.exists():
            if time.monotonic() > deadline:
                return 9
            time.sleep(0.05)
    if mode in ("stop", "wait_signal") and os.environ.get("RANK", "0") == "0" \
            and os.environ.get("SLURM_PROCID", "0") == "0":
        Path(os.environ["REQUEUE_MARKER"]).write_text("step 7 of 9\n")
    return int(os.environ.get("FAKE_PROGRAM_RC", "0"))


def squeue(argv: List[str]) -> int:
    """The user's jobs: FAKE_SQUEUE (squeue's lines, e.g. "4242\\n17_3"), else the running job's
    own id; FAKE_SQUEUE_RC: fails with it (a controller that does not answer)."""
    _record("squeue", argv)
    rc = int(os.environ.get("FAKE_SQUEUE_RC", "0"))
    if rc:
        print("squeue: error: Unable to contact slurm controller (connect failure)",
              file=sys.stderr)
        return rc
    out = os.environ.get("FAKE_SQUEUE", os.environ.get("SLURM_JOB_ID", ""))
    if out:
        print(out)
    return 0


def scancel(argv: List[str]) -> int:
    _record("scancel", argv)
    if any(a.startswith("--signal") for a in argv):
        (Path(os.environ["FAKE_LOG"]) / "scancel.signal").touch()
    return 0


def main() -> int:
    prog, argv = sys.argv[1], sys.argv[2:]
    handlers = {"srun": srun, "mpirun": mpirun, "scontrol": scontrol, "apptainer": apptainer,
                "enroot": enroot, "sbatch": sbatch, "scancel": scancel, "squeue": squeue}
    if prog in handlers:
        return handlers[prog](argv)
    if prog in _LAST_OPTION:
        return per_node_launcher(prog, argv)
    return recorder(prog, argv)


if __name__ == "__main__":
    sys.exit(main())
