"""What only a GPU machine can show (issues 20 and 21), in one run: docs/development/gpu-check.md.

    sudo python3 scripts/gpu-check.py OUTDIR [--only NAME,...]

Needs root (network namespaces), torch, `nsenter`/`unshare`, and `ip` or pyroute2. Without a
usable GPU the same checks run with gloo on the CPU and the GPU-only ones say SKIP. Prints one
``CHECK <name> PASS|FAIL|SKIP: <what>`` line per check, writes every program's output to
OUTDIR, and exits 1 if a check failed.

1. cuda-probe: the doctor's in-container probe (launcher.node.doctor.local.INSIDE_PY) run here:
   with the GPU visible the `gpus` cell passes (cuInit, device count); with
   CUDA_VISIBLE_DEVICES naming no GPU it crosses with CUDA's error.
2. device-rule: examples/distributed_sum.py as psslurm starts a second task (LOCAL_RANK=1,
   one GPU visible) runs on cuda:0 with NCCL; with GPUs requested but hidden it refuses with
   one line instead of running on the CPU.
3. nccl-jsc: two nodes in network namespaces named as on JSC (tests/helpers/jscnet.py:
   tjsc0001 reachable only as tjsc0001i), torchrun_jsc on both, one worker each on the same
   GPU (NCCL_HOSTID per node: NCCL takes them for two hosts and uses its network transport),
   NCCL_DEBUG=INFO: NCCL must use the `i` interface from the kit's NCCL_SOCKET_IFNAME==NAME.
4. bandwidth: examples/allreduce_bw.py over the same two nodes (bus bandwidth over the veth).
5. hang: tests/helpers/programs/hang_ranks.py with rank 1 stuck, under the kit's stack hook,
   progress deadline watcher (launcher.node.stacks watch) and flight recorder routing: the report
   names rank 1 and load_batch; with NCCL the watchdog's flight-recorder dumps land in the
   job's directory and torch's analyser reads them.
6. numa-binding (GPU only): torchrun's --numa-binding=node and =exclusive through torchrun_jsc
   (launch.numa_binding) start their worker on this torch.
7. hook-cost (GPU only, a measurement): step time of bench/programs/steps.py (a matmul and an
   NCCL all_reduce) without and with the stack hook and its progress thread, interleaved.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from launcher import __version__  # noqa: E402
from launcher.features import hangs as hangs_feature  # noqa: E402
from launcher.node.doctor import local  # noqa: E402
from tests.helpers import jscnet  # noqa: E402

PY = sys.executable
NODES = jscnet.NODES
RESULTS: List[Tuple[str, str, str]] = []
START = time.monotonic()


def check(name: str, verdict: str, what: str) -> None:
    RESULTS.append((name, verdict, what))
    print(f"CHECK {name} {verdict}: {what}", flush=True)
    print(f"gpu-check: {time.monotonic() - START:.0f} s since the start", flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def gpu_count() -> int:
    code = "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)"
    done = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=300)
    return int(done.stdout.strip() or 0)


def save(out: Path, name: str, text: str) -> None:
    (out / f"{name}.log").write_text(text)


# --- 1 and 2: one node, no network ---------------------------------------------------------

def cuda_probe(out: Path) -> None:
    verdicts = []
    for cvd in ("0", "99"):
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=cvd)
        done = subprocess.run([PY, "-c", local.INSIDE_PY], capture_output=True, text=True,
                              env=env, timeout=120)
        facts = json.loads(done.stdout.split("doctor-inside ", 1)[1])
        verdicts.append((cvd, facts.get("cuda"), local.gpu_cell(facts, {"gpus": 1})))
    save(out, "cuda-probe", json.dumps(verdicts, indent=1))
    (_, cuda_ok, good), (_, cuda_bad, bad) = verdicts
    ok = good["ok"] is True and bad["ok"] is False and "CUDA error 100" in bad["value"]
    check("cuda-probe", "PASS" if ok else "FAIL",
          f"visible: {cuda_ok} -> {good['ok']}; CUDA_VISIBLE_DEVICES=99: {cuda_bad} -> "
          f"{bad['value']}: {bad['cause']}")


def device_rule(out: Path) -> None:
    base = dict(os.environ, PYTHONPATH=str(ROOT), RANK="0", WORLD_SIZE="1", LOCAL_RANK="1",
                MASTER_ADDR="127.0.0.1", SLURM_GPUS_ON_NODE="1")
    argv = [PY, "examples/distributed_sum.py"]
    good = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env=dict(base, CUDA_VISIBLE_DEVICES="0", MASTER_PORT=str(free_port())))
    bad = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env=dict(base, CUDA_VISIBLE_DEVICES="", MASTER_PORT=str(free_port())))
    save(out, "device-rule", f"--- visible\n{good.stdout}{good.stderr}\n--- hidden (rc "
         f"{bad.returncode})\n{bad.stdout}{bad.stderr}")
    summary = [json.loads(line.split(" ", 1)[1]) for line in good.stdout.splitlines()
               if line.startswith("SUM_SUMMARY ")]
    refused = [line for line in (bad.stdout + bad.stderr).splitlines() if line.strip()]
    ok = (good.returncode == 0 and summary and summary[0]["ok"] and summary[0]["backend"] == "nccl"
          and bad.returncode != 0 and "SUM_SUMMARY" not in bad.stdout
          and any("GPUs were requested" in line for line in refused))
    check("device-rule", "PASS" if ok else "FAIL",
          f"LOCAL_RANK=1, one GPU: rc {good.returncode}, {summary[:1]}; GPUs requested but "
          f"hidden: rc {bad.returncode}, last line {refused[-1:] or ['(none)']}")


# --- the two JSC-like nodes ------------------------------------------------------------------

def net_up(work: Path) -> jscnet.JscNet:
    """Two nodes joined by one veth pair (tjsc0001i <-> tjsc0002i), each with its management
    address on lo; `ip` where there is one (jscnet.up), else pyroute2 (no bridge needed)."""
    if shutil.which("ip"):
        return jscnet.up(str(work))
    from pyroute2 import IPRoute, NetNS, netns

    for node in NODES:
        name = jscnet._netns(node)
        if name in netns.listnetns():
            netns.remove(name)
        netns.create(name)
    with IPRoute() as ipr:
        ipr.link("add", ifname=f"{NODES[0]}i", kind="veth", peer=f"{NODES[1]}i")
        for node in NODES:
            ipr.link("set", index=ipr.link_lookup(ifname=f"{node}i")[0],
                     net_ns_fd=jscnet._netns(node))
    for node in NODES:
        with NetNS(jscnet._netns(node)) as ns:
            lo, link = ns.link_lookup(ifname="lo")[0], ns.link_lookup(ifname=f"{node}i")[0]
            ns.link("set", index=lo, state="up")
            ns.addr("add", index=lo, address=jscnet.mgmt_addr(node), prefixlen=32)
            ns.addr("add", index=link, address=jscnet.fast_addr(node), prefixlen=24)
            ns.link("set", index=link, state="up")
    return jscnet.JscNet(NODES, jscnet._hosts_file(str(work), "hosts_jsc", NODES,
                                                   jscnet.mgmt_addr),
                         jscnet._hosts_file(str(work), "hosts_shared", NODES, jscnet.fast_addr))


def net_down() -> None:
    if shutil.which("ip"):
        jscnet.down()
        return
    from pyroute2 import netns

    for node in NODES:
        if jscnet._netns(node) in netns.listnetns():
            netns.remove(jscnet._netns(node))


def start(net: jscnet.JscNet, argv: Sequence[str], env: Dict[str, Dict[str, str]],
          log: Path) -> List[subprocess.Popen]:
    procs = []
    for node in NODES:
        f = open(log.with_name(f"{log.stem}-{node}.log"), "w")
        procs.append(subprocess.Popen(net.command(node, argv, net.hosts_jsc), cwd=ROOT,
                                      env=jscnet._clean_env(env[node]), stdout=f,
                                      stderr=subprocess.STDOUT, start_new_session=True))
    return procs


def finish(procs: List[subprocess.Popen], timeout: float) -> List[int]:
    deadline, codes = time.monotonic() + timeout, []
    for p in procs:
        try:
            codes.append(p.wait(timeout=max(0.1, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            for node in NODES:
                kill_netns(node)
            codes.append(p.wait())
    return codes


def kill_netns(node: str) -> None:
    """SIGKILL every process in the node's network namespace: the launcher, its workers
    (torchrun may start them in sessions of their own) and what they started."""
    ns = os.stat(f"/run/netns/{jscnet._netns(node)}").st_ino
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.stat(f"/proc/{pid}/ns/net").st_ino == ns:
                os.kill(int(pid), signal.SIGKILL)
        except OSError:  # gone, or not ours to look at
            pass


def launch_env(gpus: int, job: str, extra: Optional[Dict[str, str]] = None) -> Dict[str, Dict[str, str]]:
    env = {}
    for i, node in enumerate(NODES):
        e = {"SLURM_NODEID": str(i), "SLURM_JOB_ID": job, "PYTHONPATH": str(ROOT)}
        if gpus:
            e.update(CUDA_VISIBLE_DEVICES="0", SLURM_GPUS_ON_NODE="1", NCCL_HOSTID=node,
                     NCCL_DEBUG="INFO", NCCL_DEBUG_SUBSYS="INIT,NET,BOOTSTRAP")
        env[node] = dict(e, **(extra or {}))
    return env


def torchrun_jsc(program: Sequence[str], port: int) -> List[str]:
    return [PY, "-m", "launcher.task.torchrun_jsc", "--nnodes=2", "--nproc_per_node=1",
            "--rdzv_backend=c10d", f"--rdzv_endpoint={NODES[0]}i:{port}", "--rdzv_id=gpucheck",
            "--max_restarts=0", *program]


def logs(out: Path, stem: str) -> Dict[str, str]:
    return {node: (out / f"{stem}-{node}.log").read_text() for node in NODES}


def nccl_jsc(net: jscnet.JscNet, out: Path, gpus: int) -> None:
    procs = start(net, torchrun_jsc(["examples/distributed_sum.py"], free_port()),
                  launch_env(gpus, "901"), out / "nccl-jsc.log")
    codes, text = finish(procs, 240), logs(out, "nccl-jsc")
    summary = [json.loads(line.split(" ", 1)[1]) for line in text[NODES[0]].splitlines()
               if line.startswith("SUM_SUMMARY ")]
    backend = "nccl" if gpus else "gloo"
    problems = [] if codes == [0, 0] else [f"exit codes {codes}"]
    if not (summary and summary[0]["ok"] and summary[0]["backend"] == backend
            and summary[0]["hosts"] == list(NODES)):
        problems.append(f"summary {summary}")
    seen = []
    for node in NODES:
        kit = f"NCCL_SOCKET_IFNAME=={node}i (set for workers)"
        if kit not in text[node]:
            problems.append(f"{node}: torchrun_jsc did not print {kit!r}")
        if gpus:
            used = re.findall(r"NET/Socket : Using (\[0\]\S+)", text[node])
            boot = re.findall(r"Bootstrap: Using (\S+)", text[node])
            ib = re.findall(r"NET/IB : (.*)", text[node])
            seen.append(f"{node}: NET/Socket {used[:1]}, bootstrap {boot[:1]}, NET/IB {ib[:1]}")
            if not used or not used[0].startswith(f"[0]{node}i:"):
                problems.append(f"{node}: NCCL's socket transport is not on {node}i: {used}")
    check("nccl-jsc" if gpus else "gloo-jsc", "FAIL" if problems else "PASS",
          "; ".join(problems or [f"sum {summary[0]['sum']} over {summary[0]['hosts']} with "
                                 f"{backend}"] + seen))


def bandwidth(net: jscnet.JscNet, out: Path, gpus: int) -> None:
    program = ROOT / "examples" / "allreduce_bw.py"
    if not program.exists():
        check("bandwidth", "SKIP", "examples/allreduce_bw.py is not in this tree")
        return
    procs = start(net, torchrun_jsc([str(program)], free_port()), launch_env(gpus, "902"),
                  out / "bandwidth.log")
    codes, text = finish(procs, 300), logs(out, "bandwidth")
    rows = [json.loads(line.split(" ", 1)[1]) for line in text[NODES[0]].splitlines()
            if line.startswith("ALLREDUCE_BW ")]
    ok = codes == [0, 0] and rows
    check("bandwidth", "PASS" if ok else "FAIL",
          f"exit codes {codes}; " + "; ".join(
              f"{r.get('bytes')} B {r.get('backend')} busbw {r.get('busbw_gbps')} GB/s"
              for r in rows))


def flight_recorder_env(out: Path, job: str, hangs: Path) -> Dict[str, str]:
    """The flight recorder's variables as a jobscript exports them, from their one rule
    (launcher/node/job.sh jsc_hangs_setup, run here by bash in ``out``), pointing at ``hangs``."""
    names = hangs_feature.flight_recorder_names()
    script = (f'kit={ROOT / "launcher"}\nsource "$kit/node/job.sh" {__version__}\n'
              'jsc_hangs_setup RANK\nfor n in "$@"; do printf "%s=%s\\n" "$n" "${!n}"; done')
    done = subprocess.run(["bash", "-euc", script, "fr", *names], capture_output=True,
                          text=True, timeout=30, check=True, cwd=out,
                          env={"PATH": os.environ["PATH"], "SLURM_JOB_ID": job})
    shutil.rmtree(out / ".hangs", ignore_errors=True)
    pairs = (line.split("=", 1) for line in done.stdout.splitlines())
    return {n: v.replace(f"{out}/.hangs/{job}", str(hangs)) for n, v in pairs}


def hang(net: jscnet.JscNet, out: Path, gpus: int) -> None:
    job = "903"
    hangs = out / "hangs"
    shutil.rmtree(hangs, ignore_errors=True)
    for sub in ("stacks", "fr", "progress", "ready"):
        (hangs / sub).mkdir(parents=True)
    (hangs / "progress" / "period").write_text("1\n")
    hook = ROOT / "launcher" / "task" / "hook"  # the kit's stack hook, as hook.sh puts it
    extra = {hangs_feature.DIR_ENV: str(hangs), "PYTHONPATH": f"{hook}:{ROOT}",
             "READY_DIR": str(hangs / "ready"), "HANG_RANK": "1",
             "HANG_BACKEND": "nccl" if gpus else "gloo", "HANG_PG_TIMEOUT_S": "45"}
    extra.update(flight_recorder_env(out, job, hangs))
    program = str(ROOT / "tests" / "helpers" / "programs" / "hang_ranks.py")
    t0 = time.time()
    procs = start(net, torchrun_jsc([program], free_port()), launch_env(gpus, job, extra),
                  out / "hang.log")
    # One collector per node, run on that node (its hostname: dumps are matched by host and
    # pid, as on real nodes), as the jobscript's srun step does.
    node_run = str(ROOT / "launcher" / "node" / "run.py")  # as the jobscript runs it
    node_step = [PY, "-I", node_run, "stacks", "node", job, "10"]
    collector = ["sh", "-c", "; ".join(shlex.join(net.command(node, node_step, net.hosts_jsc))
                                       for node in net.nodes)]
    watch = subprocess.run([PY, "-I", node_run, "stacks", "watch", job, str(hangs),
                            "15", "1", "1", "--", *collector], capture_output=True, text=True,
                           timeout=240)
    t_report = time.time() - t0
    # NCCL: wait for its watchdog (the process group's 45 s) and the flight recorder's dumps;
    # gloo writes none, so its ranks are ended once the report is in.
    codes = finish(procs, 150 if gpus else 0)
    t_end = time.time() - t0
    save(out, "hang-watch", watch.stdout + watch.stderr)
    verdict = (hangs / "no-progress").read_text() if (hangs / "no-progress").exists() else ""
    problems = []
    if not re.search(r"rank 1 on tjsc0002 in load_batch", watch.stdout):
        problems.append("the report does not name rank 1 on tjsc0002 in load_batch")
    if "rank 1" not in verdict:
        problems.append(f"verdict: {verdict.strip()!r}")
    detail = [f"report after {t_report:.0f} s: {verdict.strip()}",
              f"launch ended after {t_end:.0f} s with {codes}"]
    if gpus:
        dumps = sorted(p.name for p in (hangs / "fr").iterdir())
        detail.append(f"flight recorder dumps {dumps}")
        if not dumps:
            problems.append("no flight-recorder dump in the job's directory")
        else:
            fr = subprocess.run([PY, "-m", "torch.distributed.flight_recorder.fr_trace",
                                 str(hangs / "fr"), "-p", "rank-", "--allow-incomplete-ranks"],
                                capture_output=True, text=True, timeout=120)
            save(out, "hang-fr-trace", fr.stdout + fr.stderr)
            tail = (fr.stdout + fr.stderr).strip().splitlines()[-3:]
            detail.append(f"fr_trace rc {fr.returncode}: {' | '.join(tail)}")
    check("hang-nccl" if gpus else "hang-gloo", "FAIL" if problems else "PASS",
          "; ".join(problems + detail))


STEPS = str(ROOT / "bench" / "programs" / "steps.py")
REPEATS = 3


def steps_us(text: str) -> Optional[float]:
    m = re.search(r"^STEPS .*per_step_us=([\d.]+)", text, re.M)
    return float(m.group(1)) if m else None


def hook_cost(net: jscnet.JscNet, out: Path, gpus: int) -> None:
    """Step time (a 2048 matmul and an NCCL all_reduce over the two nodes) without the kit's
    hook and with the hook and its progress thread looking every second (a deadline's period
    is a tenth of it, at least 13 s): interleaved, medians, the ratio. A measurement, not a
    verdict; on the CPU `make bench --only hangs` measures it."""
    if not gpus:
        check("hook-cost", "SKIP", "a GPU measurement (CPU: make bench --only hangs)")
        return
    hangs = out / "hooked"
    for sub in ("stacks", "progress"):
        (hangs / sub).mkdir(parents=True, exist_ok=True)
    (hangs / "progress" / "period").write_text("1\n")
    hook = ROOT / "launcher" / "task" / "hook"  # the kit's stack hook, as hook.sh puts it
    hooked = {hangs_feature.DIR_ENV: str(hangs), "PYTHONPATH": f"{hook}:{ROOT}"}
    runs: Dict[str, List[float]] = {"without": [], "hook": []}
    for r in range(REPEATS):
        for name, extra in (("without", {}), ("hook", hooked)):
            env = launch_env(gpus, f"91{r}", extra)
            for node in NODES:  # NCCL's INFO lines are not wanted here
                env[node].pop("NCCL_DEBUG"), env[node].pop("NCCL_DEBUG_SUBSYS")
            stem = f"cost-{name}-{r}"
            codes = finish(start(net, torchrun_jsc([STEPS, "--steps", "5000"], free_port()),
                                 env, out / f"{stem}.log"), 300)
            us = steps_us(logs(out, stem)[NODES[0]])
            if codes == [0, 0] and us is not None:
                runs[name].append(us)
    marks = sorted(p.name for p in (hangs / "progress").glob("rank-*"))
    if len(runs["without"]) < REPEATS or len(runs["hook"]) < REPEATS or len(marks) != 2:
        check("hook-cost", "FAIL", f"runs {runs}, progress marks {marks}")
        return
    base, hook = sorted(runs["without"])[1], sorted(runs["hook"])[1]
    check("hook-cost", "PASS", f"per step {base:.1f} us without the hook, {hook:.1f} us with it "
          f"and its progress thread (medians of {REPEATS}, interleaved): {hook / base:.3f}x; "
          f"runs {runs}")


def numa(out: Path, gpus: int) -> None:
    """torchrun's --numa-binding (launch.numa_binding) through torchrun_jsc on this torch:
    the worker runs, bound to the CPUs torch chose for the GPU's NUMA node."""
    version = subprocess.run([PY, "-c", "import torch; print(torch.__version__)"],
                             capture_output=True, text=True, timeout=300).stdout.strip()
    results = []
    for mode in ("node", "exclusive"):
        env = dict(jscnet._clean_env({"PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": "0"}))
        done = subprocess.run([PY, "-m", "launcher.task.torchrun_jsc", "--standalone",
                               "--nproc_per_node=1", f"--numa-binding={mode}", STEPS,
                               "--steps", "100"], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=300)
        save(out, f"numa-{mode}", done.stdout + done.stderr)
        line = re.findall(r"^STEPS .*", done.stdout, re.M)
        results.append((mode, done.returncode, line[:1] or
                        (done.stdout + done.stderr).strip().splitlines()[-1:]))
    ok = all(rc == 0 and line and line[0].startswith("STEPS") for _, rc, line in results)
    check("numa-binding", "PASS" if ok else "FAIL",
          f"torch {version}, {os.cpu_count()} CPUs here: " + "; ".join(
              f"--numa-binding={m}: rc {rc} {line}" for m, rc, line in results))


LOCAL = ("cuda-probe", "device-rule", "numa-binding")
NETWORK = ("nccl-jsc", "bandwidth", "hang", "hook-cost")
USAGE = ("usage: python3 scripts/gpu-check.py OUTDIR [--only NAME,...]  (names: "
         + ", ".join(LOCAL + NETWORK) + ")")


def main(argv: Sequence[str]) -> int:
    only = set(LOCAL + NETWORK)
    if len(argv) == 3 and argv[1] == "--only":
        only = set(argv[2].split(","))
    if len(argv) not in (1, 3) or (len(argv) == 3 and argv[1] != "--only") \
            or not only <= set(LOCAL + NETWORK):
        print(USAGE, file=sys.stderr)
        return 2
    out = Path(argv[0]).resolve()
    out.mkdir(parents=True, exist_ok=True)
    gpus = gpu_count()
    print(f"gpu-check: {gpus} GPU(s), python {sys.version.split()[0]}", flush=True)
    for name in LOCAL:
        if name not in only:
            continue
        if not gpus:
            check(name, "SKIP", "no GPU")
        else:
            {"cuda-probe": cuda_probe, "device-rule": device_rule,
             "numa-binding": lambda o: numa(o, gpus)}[name](out)
    if only & set(NETWORK):
        net = net_up(out)
        try:
            for name, run in (("nccl-jsc", nccl_jsc), ("bandwidth", bandwidth), ("hang", hang),
                              ("hook-cost", hook_cost)):
                if name in only:
                    run(net, out, gpus)
        finally:
            net_down()
    failed = [name for name, verdict, _ in RESULTS if verdict == "FAIL"]
    print(f"gpu-check: {len(RESULTS) - len(failed)} of {len(RESULTS)} passed or skipped; "
          f"failed: {' '.join(failed) or 'none'}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
