"""Ring 1: spec loading and validation (pure; no torch, no Slurm)."""

import textwrap

import pytest

from launcher.model import JSC_SUFFIXES, SITE_PROFILES, Bind, SpecError
from launcher.modes.common import TorchrunOptions
from launcher.spec import load_spec, parse_spec

BASE = """\
job:
  nodes: 2
program: [python3, train.py]
"""


def parse(text: str, file: str = "x.yaml"):
    return parse_spec(textwrap.dedent(text), file)


def error(text: str) -> str:
    with pytest.raises(SpecError) as info:
        parse(text)
    return str(info.value)


def test_minimal_spec_has_documented_defaults():
    spec = parse(BASE, "jobs/demo.yaml")
    assert spec.job.name == "demo"  # from the file name
    assert spec.job.nodes == 2 and spec.job.gpus_per_node == 0
    assert spec.job.output == "%x-%j.out"
    assert spec.job.node_output == "logs/%x-%j.node%n.out"
    assert spec.site == SITE_PROFILES["generic"]
    assert spec.runtime.kind == "bare"
    assert spec.launch.mode == "torchrun" and spec.launch.procs_per_node == 1
    assert spec.launch.command == ("torchrun_jsc",)
    assert spec.launch.options == TorchrunOptions(max_restarts=0)
    assert spec.program == ("python3", "train.py")


def test_full_spec_round_trip():
    spec = parse("""\
        job: {name: n, nodes: 4, time: "1-00:00:00", partition: p, account: a,
              cpus_per_task: 8, gpus_per_node: 4, output: o.out, error: e.err,
              node_output: null, sbatch: {exclusive: true, mem: 0}}
        site: {profile: jsc, modules: [GCC, OpenMPI], venv: /p/venv, socket_ifname: ib0}
        env: {set: {B: "2", A: "1"}, pass: [NCCL_*, http_proxy, NCCL_*]}
        runtime:
          kind: apptainer
          image: image.sif
          binds: [{source: /p/data, target: /data, read_only: true}, /scratch]
          nv: false
          cache_dir: /tmp/cache
        launch: {mode: srun, rdzv_port: 29400}
        program: [python3, -m, pkg, --steps, 5]
        """)
    assert spec.job.sbatch == (("exclusive", None), ("mem", "0"))
    assert spec.job.node_output is None
    assert spec.site.hostname_suffix == JSC_SUFFIXES and spec.site.modules == ("GCC", "OpenMPI")
    assert spec.env.values == (("A", "1"), ("B", "2"))  # sorted
    assert spec.env.passthrough == ("NCCL_*", "http_proxy")  # sorted, deduplicated
    assert spec.runtime.binds == (Bind("/p/data", "/data", True), Bind("/scratch", "/scratch"))
    assert spec.runtime.nv is False
    assert spec.launch.procs_per_node == 4  # gpus_per_node
    assert spec.program[-1] == "5"  # integers become strings


@pytest.mark.parametrize("text, expected", [
    ("job: {nodes: 1, nodez: 2}\nprogram: [x]",
     "x.yaml: job: unknown key 'nodez' (did you mean 'nodes'?)"),
    ("job: {nodes: 1}\nprogram: [x]\nruntime: {kind: apptainer, image: i.sif, bind: []}",
     "x.yaml: runtime: unknown key 'bind' (did you mean 'binds'?)"),
    ("jbo: {nodes: 1}\nprogram: [x]", "x.yaml: unknown key 'jbo' (did you mean 'job'?)"),
    ("job: {nodes: 0}\nprogram: [x]", "x.yaml: job.nodes: must be between 1 and 100000, got 0"),
    ("job: {nodes: two}\nprogram: [x]", "x.yaml: job.nodes: must be an integer, got 'two'"),
    ("job: {nodes: true}\nprogram: [x]", "x.yaml: job.nodes: must be an integer, got True"),
    ("job: {}\nprogram: [x]", "x.yaml: job.nodes: is required"),
    ("job: {nodes: 1}", "x.yaml: program: is required"),
    ("job: {nodes: 1}\nprogram: []",
     "x.yaml: program: must name a command, e.g. [python3, train.py], got []"),
    ("job: {nodes: 1}\nprogram: python3 x.py", "x.yaml: program: must be a list, got 'python3 x.py'"),
    ("job: {nodes: 1}\nprogram: [x, {a: 1}]", "x.yaml: program[1]: must be a string, got {'a': 1}"),
    ("job: {nodes: 1}\nprogram: [x]\nruntime: {kind: apptainer}",
     "x.yaml: runtime.image: is required"),
    ("job: {nodes: 1}\nprogram: [x]\nruntime: {kind: enroot, image: ''}",
     "x.yaml: runtime.image: must not be empty, got ''"),
    ("job: {nodes: 1}\nprogram: [x]\nruntime: {kind: docker}",
     "x.yaml: runtime.kind: must be one of bare, apptainer, enroot, pyxis, got 'docker'"),
    ("job: {nodes: 1}\nprogram: [x]\nruntime: {kind: apptainer, image: i, binds: [{source: data}]}",
     "x.yaml: runtime.binds[0].source: source path must be absolute (or start with $VAR or ~, expanded on the node), got 'data'"),
    ("job: {nodes: 1}\nprogram: [x]\nruntime: {kind: apptainer, image: i, binds: [{source: ''}]}",
     "x.yaml: runtime.binds[0].source: must not be empty, got ''"),
    ("job: {nodes: 1}\nprogram: [x]\n"
     "runtime: {kind: apptainer, image: i, binds: [/a, {source: /b, target: rel}]}",
     "x.yaml: runtime.binds[1].target: target path must be absolute (or start with $VAR or ~, expanded on the node), got 'rel'"),
    ("job: {nodes: 1}\nprogram: [x]\nruntime: {kind: apptainer, image: i, binds: [/a:b]}",
     "x.yaml: runtime.binds[0].source: apptainer cannot express a path containing ':', got '/a:b'"),
    ("job: {nodes: 1}\nprogram: [x]\nruntime: {kind: enroot, image: i.sqsh, binds: ['/a b']}",
     "x.yaml: runtime.binds[0].source: enroot cannot express a path containing ' ', got '/a b'"),
    ("job: {nodes: 1}\nprogram: [x]\nruntime: {kind: apptainer, image: i, binds: /a}",
     "x.yaml: runtime.binds: must be a list of {source, target, read_only}, got '/a'"),
    ("job: {nodes: 1}\nprogram: [x]\nruntime: {kind: apptainer, image: i, nv: yes please}",
     "x.yaml: runtime.nv: must be true or false, got 'yes please'"),
    ("job: {nodes: 1, time: 10 minutes}\nprogram: [x]",
     "x.yaml: job.time: must be a Slurm time: minutes (90), M:S, H:M:S (24:00:00), "
     "D-H, D-H:M or D-H:M:S (1-12:00:00), got '10 minutes'"),
    ("job: {nodes: 1, name: \"a\\nb\"}\nprogram: [x]",
     "x.yaml: job.name: must not contain a newline, got 'a\\nb'"),
    ("job: {nodes: 1, name: a/b}\nprogram: [x]",
     "x.yaml: job.name: must not contain '/' or '\\' while an output file pattern uses %x, "
     "got 'a/b'"),
    ("job: {nodes: 1, output: $SCRATCH/%j.out}\nprogram: [x]",
     "x.yaml: job.output: sbatch/srun do not expand variables here; write the value (Slurm's "
     "own %-patterns like %j and %x do work), got '$SCRATCH/%j.out'"),
    ("job: {nodes: 1, sbatch: {chdir: $HOME}}\nprogram: [x]",
     "x.yaml: job.sbatch.chdir: sbatch/srun do not expand variables here; write the value "
     "(Slurm's own %-patterns like %j and %x do work), got '$HOME'"),
    ("job: {nodes: 1}\nprogram: [x]\nenv: {set: {A: x}, pass: [A]}",
     "x.yaml: env.pass[0]: is also set in env.set, env.prepend or env.append; keep one, "
     "got 'A'"),
    ("job: {nodes: 1, sbatch: {nodes: 3}}\nprogram: [x]",
     "x.yaml: job.sbatch.nodes: is written by the composer; set job.nodes instead"),
    ("job: {nodes: 1, node_output: 'logs/%j/n%n.out'}\nprogram: [x]",
     "x.yaml: job.node_output: the directory part cannot hold %-patterns (the script creates "
     "it before Slurm expands them), got 'logs/%j/n%n.out'"),
    ("job: {nodes: 1}\nprogram: [x]\nsite: cern",
     "x.yaml: site.profile: must be one of cray-ex, generic, jsc, got 'cern'"),
    ("job: {nodes: 1}\nprogram: [x]\nsite: {profile: jsc, hostname_suffix: 'i; rm'}",
     "x.yaml: site.hostname_suffix: must be letters, digits, '.' or '-', got 'i; rm'"),
    ("job: {nodes: 1}\nprogram: [x]\nenv: {set: {1BAD: x}}",
     "x.yaml: env.set: keys must be environment variable names, got '1BAD'"),
    ("job: {nodes: 1}\nprogram: [x]\nenv: {pass: ['NCCL_*_X']}",
     "x.yaml: env.pass[0]: must be a variable name or a prefix ending in '*', e.g. NCCL_*, "
     "got 'NCCL_*_X'"),
    ("job: {nodes: 1}\nprogram: [x]\nlaunch: {mode: lightning}",
     "x.yaml: launch.mode: must be one of torchrun, srun, horovod, mpirun_torchrun, "
     "accelerate, deepspeed, ray, got 'lightning'"),
    ("job: {nodes: 1}\nprogram: [x]\nlaunch: {rdzv_port: 70000}",
     "x.yaml: launch.rdzv_port: must be between 1 and 65535, got 70000"),
    ("job: {nodes: 1}\nprogram: [x]\nruntime: {kind: bare, image: x.sif}",
     "x.yaml: runtime: unknown key 'image' (accepted: kind)"),
    ("- a\n- b", "x.yaml: must be a mapping, got ['a', 'b']"),
])
def test_bad_input_names_file_path_and_value(text, expected):
    assert error(text) == expected


def test_malformed_yaml_gives_line_and_column():
    message = error("job:\n  nodes: [1,\nprogram: [x]\n")
    assert message == ("x.yaml: line 4, column 1: malformed YAML: expected ',' or ']', "
                       "but got '<stream end>'")


def test_duplicate_keys_are_rejected():
    message = error("job:\n  nodes: 1\n  nodes: 2\nprogram: [x]\n")
    assert message == "x.yaml: line 3, column 3: malformed YAML: duplicate key 'nodes'"


def test_missing_file(tmp_path):
    missing = tmp_path / "nope.yaml"
    with pytest.raises(SpecError) as info:
        load_spec(str(missing))
    assert str(info.value) == f"{missing}: cannot read spec: No such file or directory"


def test_empty_file_reports_missing_job(tmp_path):
    path = tmp_path / "empty.yaml"
    path.write_text("")
    with pytest.raises(SpecError, match=r"empty.yaml: job: is required"):
        load_spec(str(path))


def test_hostile_values_are_accepted_where_representable():
    spec = parse("""\
        job: {nodes: 1, name: "a b'c\\"d;$(x)`y`ü"}
        env: {set: {HOSTILE: "line1\\nline2 $$(rm -rf /) `id` 'q' \\"dq\\" ü $$$$HOME"}}
        runtime: {kind: apptainer, image: "my image.sif", binds: ["/data dir/ü'$(x)"]}
        program: [python3, "a b", "$(id)", "`id`", "x;y", "new\\nline"]
        """)
    assert spec.job.name == "a b'c\"d;$(x)`y`ü"
    assert spec.runtime.binds[0].source == "/data dir/ü'$(x)"
    assert spec.program[-1] == "new\nline"
    assert spec.env.values == (("HOSTILE", "line1\nline2 $(rm -rf /) `id` 'q' \"dq\" ü $$HOME"),)
