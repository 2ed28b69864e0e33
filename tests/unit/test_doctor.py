"""Ring 1: the doctor without Slurm. The spec key, the rendered step (bash -n, shellcheck,
placement before the launch), the kit's entry (``python3 -I KIT/node/run.py doctor``, run
alone), the collector (a node without a report, a node that resolves the name elsewhere) and
the table; the CLI's one-line errors. The node checks on this machine:
tests/fakes/test_doctor.py."""

import itertools
import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from launcher import kit
from launcher.cli import main
from launcher.node.doctor import node, report
from launcher.features.preflight import node_config
from launcher.render.jobscript import render_jobscript
from launcher.model import SpecError
from launcher.spec import parse_spec
from tests.helpers.doctor import report as _rep

ROOT = Path(__file__).resolve().parents[2]
SPEC = """\
job: {nodes: 2}
site: jsc
runtime: {kind: apptainer, image: image.sif, binds: [/data]}
launch: {rdzv_port: 29400, preflight: true}
program: [python3, train.py]
"""


RUN_PY = kit.installed() / "node" / "run.py"
JOB_SH = kit.installed() / "node" / "job.sh"


def spec_of(text: str):
    return parse_spec(textwrap.dedent(text), "t.yaml")


def shellcheck(text: str, script: Path) -> None:
    """shellcheck -x on the script, reading the functions it sources from the kit's
    launcher/node/job.sh (as bash does on the node)."""
    line = next(x for x in text.splitlines() if x.startswith('source "$kit/node/job.sh" '))
    script.write_text(text.replace(line, f"# shellcheck source={JOB_SH}\n{line}", 1))
    assert shutil.which("shellcheck"), "shellcheck missing: run `make setup` (apt shellcheck)"
    done = subprocess.run(["shellcheck", "-x", "--shell=bash", str(script)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("value, expected", [
    ("true", (True, False)), ("false", (False, False)), ("{fake_gpus: true}", (True, True)),
])
def test_preflight_key(value, expected):
    spec = spec_of(SPEC.replace("preflight: true", f"preflight: {value}"))
    pre = spec.launch.preflight
    assert (pre is not None, bool(pre and pre.fake_gpus)) == expected


@pytest.mark.parametrize("value, message", [
    ("yes please", "t.yaml: launch.preflight: must be true, false or a mapping {fake_gpus: "
                   "BOOL}, got 'yes please'"),
    ("{fake: true}", "t.yaml: launch.preflight: unknown key 'fake' (did you mean "
                     "'fake_gpus'?)"),
    ("{fake_gpus: 1}", "t.yaml: launch.preflight.fake_gpus: must be true or false, got 1"),
])
def test_preflight_key_errors(value, message):
    with pytest.raises(SpecError) as err:
        spec_of(SPEC.replace("preflight: true", f"preflight: {value}"))
    assert str(err.value) == message


def test_step_runs_after_setup_and_before_the_launch(tmp_path):
    text = render_jobscript(spec_of(SPEC))
    step = text.index('"${kit}/node/run.py" doctor node')
    flat = " ".join(text.replace("\\\n", " ").split())  # the renderer's line breaks
    # one task per node, with every CPU of the node, the host's python3 isolated
    assert '"--ntasks=${nnodes}" --ntasks-per-node=1 "--cpus-per-task=${cpus_per_node}" ' \
        'python3 -I "${kit}/node/run.py" doctor node "${doctor_conf}" "${rdzv_host}" ' \
        '"${rdzv_port}" -- apptainer exec' in flat
    assert text.index("rdzv_port=29400") < step < text.index("# Launch:")
    assert "|| { echo \"preflight: a check failed (table above); not launching\" >&2; exit 1; }" \
        in text
    flat = " ".join(text.replace("\\\n", " ").split())  # the line breaks are the renderer's
    # launcher/node/job.sh jsc_doctor runs the step and hands its reports to `doctor table`.
    assert 'jsc_doctor table srun "--nodes=${nnodes}"' in flat
    assert flat.index("jsc_doctor table srun") < flat.index('--bind /data:/data --bind "${PWD}" '
                                                            "image.sif || { echo")
    job_sh = (kit.installed() / "node" / "job.sh").read_text(encoding="utf-8")
    body = job_sh[job_sh.index("jsc_doctor() {"):]
    body = " ".join(body[:body.index("\n}\n")].replace("\\\n", " ").split())
    assert 'doctor_t0=$(date +%s.%N) "${@:2}" | python3 -I "$kit/node/run.py" doctor "$1" ' \
        '"$doctor_conf" "$rdzv_host" "$rdzv_port" "$hostnames" "$doctor_t0"' in body
    script = tmp_path / "s.job"
    script.write_text(text)
    subprocess.run(["bash", "-n", str(script)], check=True)
    shellcheck(text, script)
    plain = render_jobscript(spec_of(SPEC.replace("preflight: true", "preflight: false")))
    assert "doctor" not in plain


def test_doctor_script_ends_after_the_step():
    text = render_jobscript(spec_of(SPEC), doctor=True)
    assert "# Launch:" not in text and "srun --kill-on-bad-exit=1" not in text
    assert text.rstrip().endswith("|| exit 1")
    assert text.count("jsc_doctor json srun ") == 1


def test_config_from_spec():
    conf = node_config(spec_of(SPEC))
    assert conf["binds"] == ["/data"] and conf["image"] == "image.sif"
    # torchrun_jsc comes from the kit (launcher/task): not looked for in the image, its torch is
    assert conf["launcher"] is None and conf["min_torch"] == "1.9"
    srun = node_config(spec_of(SPEC.replace("rdzv_port: 29400", "mode: srun, rdzv_port: 1")))
    assert srun["launcher"] is None and srun["min_torch"] is None


def test_the_kit_entry_runs_the_collector_alone(tmp_path):
    """python3 -I KIT/node/run.py doctor table ..., as the batch shell runs it: from another
    directory, with nothing on PYTHONPATH, the reports on stdin, the table on stdout and exit 1
    for a cross; `json` hands the same reports to the CLI."""
    conf = json.dumps(node_config(spec_of(SPEC)))
    stdin = "\n".join([node.MARK + json.dumps(_rep("n1", 0, "10.0.0.1")),
                       node.MARK + json.dumps(_rep("n2", 1, "10.0.0.1"))]) + "\n"
    env = {"PATH": "/usr/bin:/bin"}

    def run(what, nodes):
        return subprocess.run([sys.executable, "-I", str(RUN_PY), "doctor", what, conf, "n1i",
                               "29400", nodes, ""], input=stdin, cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=60, check=False)
    done = run("table", "n1 n2")
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    assert done.stdout == report.render_table(report.collect(stdin.splitlines(), ["n1", "n2"]))
    assert done.stdout.splitlines()[0] == "doctor: 2 nodes, rendezvous n1i:29400, checks took " \
        "1.2 s"
    missing = run("table", "n1 n2 n3")
    assert missing.returncode == 1
    assert missing.stdout.splitlines()[-1] == "doctor: 1 check failed on 1 node"
    data = run("json", "n1 n2 n3")
    assert data.returncode == 1 and data.stdout.startswith(report.RESULT_MARK)
    assert [r["node"] for r in json.loads(data.stdout[len(report.RESULT_MARK):])] == \
        ["n1", "n2", "n3"]


def test_collect_and_table():
    lines = [node.MARK + json.dumps(_rep("n2", 1, "10.0.0.2", first=("10.0.0.2", "mine"))),
             "noise", node.MARK + json.dumps(_rep("n1", 0, "10.0.0.1"))]
    reps = report.collect(lines, ["n1", "n2", "n3"])
    assert [r["node"] for r in reps] == ["n1", "n2", "n3"]
    assert reps[1]["checks"]["same"] == node.cell(False, "10.0.0.2", "the first node (n1) "
                                                  "resolves it to 10.0.0.1")
    text = report.render_table(reps)
    lines = text.splitlines()
    assert lines[0] == "doctor: 3 nodes, rendezvous n1i:29400, checks took 1.2 s"
    assert lines[1].split() == ["node", *node.COLUMNS]
    assert "X 10.0.0.2: the first node ..." in lines[3]
    assert "n3 name: no report: the check did not run on this node or was killed (see the " \
           "job's error log)" in lines
    assert lines[-1] == "doctor: 3 checks failed on 2 nodes"
    data = json.loads(report.render_json(reps))
    assert data["ok"] is False and data["rendezvous"] == "n1i:29400"
    assert {(f["node"], f["check"]) for f in data["failures"]} == \
        {("n2", "first"), ("n2", "same"), ("n3", "name")}


def test_cli_errors(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.yaml").write_text(SPEC)
    assert main(["doctor", "missing.yaml"]) == 2
    assert capsys.readouterr().err.startswith("missing.yaml: cannot read spec")
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    assert main(["doctor", "s.yaml", "--", "-p", "x"]) == 2
    assert capsys.readouterr().err == (
        "s.yaml: --: inside an allocation (SLURM_JOB_ID is set) the doctor uses its nodes; "
        "sbatch options and --nodelist mean nothing here, got '-p x'\n")


@pytest.mark.parametrize("name", sorted(p.name for p in (ROOT / "jobs").glob("*.yaml")))
def test_preflight_renders_in_every_checked_in_job(name, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    import yaml

    data = yaml.safe_load((ROOT / "jobs" / name).read_text())
    data.setdefault("launch", {})["preflight"] = True
    text = render_jobscript(parse_spec(yaml.safe_dump(data), f"jobs/{name}"))
    assert text.index("# Preflight") < text.index("# Launch:")
    script = tmp_path / "s.job"
    script.write_text(text)
    subprocess.run(["bash", "-n", str(script)], check=True)
    shellcheck(text, script)


def test_first_node_cell():
    assert node.first_cell(True, "10.0.0.1", ["10.0.0.1"], ["10.0.0.1"])["ok"] is True
    assert node.first_cell(False, "10.0.0.1", ["10.0.0.1"], [])["ok"] is True
    assert node.first_cell(True, "10.0.0.2", ["10.0.0.2"], [])["cause"].startswith(
        "not an address of this node, which is the first node")
    assert node.first_cell(False, "10.0.0.2", ["10.0.0.2"], ["10.0.0.2"])["cause"].endswith(
        "(this node resolves the name to itself)")
    assert node.first_cell(False, "10.0.0.2", ["10.0.0.2", "10.0.0.1"], ["10.0.0.2"]) == \
        node.cell(False, "10.0.0.2, 10.0.0.1", "resolves to addresses on this node (10.0.0.2) "
                  "and not on it (10.0.0.1): use a name of one node only")
    assert node.first_cell(False, None, [], [])["ok"] is None


def test_waiting_on_slurm_backs_off(monkeypatch):
    """A job that stays queued for the doctor's whole 15 minutes costs about 95 squeue calls
    (0.2 s doubling to 10 s), not 4,500 at a fixed 0.2 s: slurmctld is shared by everyone."""
    from launcher.submit import doctor as run
    clock = [0.0]
    calls = []

    def squeue(argv, **_kw):
        calls.append(argv)
        return subprocess.CompletedProcess(argv, 0, "PENDING Priority\n" if argv[0] == "squeue" else "", "")

    monkeypatch.setattr(run.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(run.time, "sleep", lambda s: clock.__setitem__(0, clock[0] + s))
    monkeypatch.setattr(run.subprocess, "run", squeue)
    with pytest.raises(run.SubmitError, match="did not end within 900 s; cancelled"):
        run._wait("42", 900.0)
    polls = [c for c in calls if c[0] == "squeue"]
    assert 80 <= len(polls) <= 100, len(polls)
    assert calls[-1] == ["scancel", "42"]
    assert list(itertools.islice(run.poll_delays(), 8)) == [0.2, 0.4, 0.8, 1.6, 3.2, 6.4, 10.0, 10.0]


def _sysfs(root: Path, devices) -> str:
    for name, kind in devices.items():
        (root / name).mkdir(parents=True)
        (root / name / "type").write_text(f"{kind}\n")
        (root / name / "operstate").write_text("up\n")
    return str(root)


def test_iface_names_the_kind_and_warns_of_a_fast_one_beside_it(tmp_path, monkeypatch):
    """The interface towards the rendezvous address (this machine's real route to one of its
    own addresses), its kind from a faked /sys/class/net, and the warning where an IPoIB
    interface with an address sits beside a slower one that would carry the traffic."""
    real = node.interface_addresses()
    addr, name = next((a, n) for a, n in sorted(real.items()) if n != "lo" and ":" not in a)
    monkeypatch.setattr(node, "interface_addresses", lambda: {**real, "10.13.0.5": "ib9"})
    got = node.iface(addr, {}, _sysfs(tmp_path / "a", {name: 1, "ib9": 32}))
    assert got["ok"] is True and got["value"] == name
    assert got["warn"] == (f"{name} reaches {addr}, while ib9 (InfiniBand, 10.13.0.5) is on this "
                           "node: the rendezvous and the sockets would use the slower network; "
                           "name the fast one (site.hostname_suffix, or site generic's rule)")
    fast = node.iface(addr, {}, _sysfs(tmp_path / "b", {name: 32, "ib9": 32}))
    assert fast == node.cell(True, f"{name} (InfiniBand)")
    chosen = node.iface(addr, {"GLOO_SOCKET_IFNAME": name},
                        _sysfs(tmp_path / "c", {name: 1, "ib9": 32}))
    assert chosen == node.cell(True, name)  # the user named it: no warning


def test_table_says_which_network_and_the_warning():
    reps = [_rep("n1", 0, "10.0.0.1"), _rep("n2", 1, "10.0.0.1")]
    reps[0]["checks"]["iface"] = node.cell(True, "ib0 (InfiniBand)")
    reps[1]["checks"]["iface"] = dict(node.cell(True, "eth0"), warn="eth0 reaches 10.0.0.1, ...")
    lines = report.render_table(report.collect(
        [node.MARK + json.dumps(r) for r in reps], ["n1", "n2"])).splitlines()
    assert lines[4:] == ["network: n1i -> 10.0.0.1 -> ib0 (InfiniBand) on 1 node (n1)",
                         "network: n1i -> 10.0.0.1 -> eth0 on 1 node (n2)",
                         "n2 iface: warning: eth0 reaches 10.0.0.1, ...",
                         "doctor: all checks passed"]
    data = json.loads(report.render_json(reps))
    assert data["ok"] is True and data["warnings"] == [
        {"node": "n2", "check": "iface", "text": "eth0 reaches 10.0.0.1, ..."}]
