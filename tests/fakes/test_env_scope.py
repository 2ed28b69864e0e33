"""Ring 2: env.set's PATH and LD_PRELOAD reach the program, byte-identical, while the batch
script's own srun and scontrol still come from the job's PATH (issue 43, item 3;
launcher/features/env.py TASK_ONLY, launcher/task/hook.sh). The spec side: tests/unit/
test_env_scope.py."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from tests.helpers.cluster import Cluster, cleaned


@pytest.fixture
def fakes(tmp_path: Path) -> Iterator[Cluster]:
    yield from cleaned(Cluster(tmp_path))


@pytest.mark.parametrize("mode", ["srun", "torchrun"])
def test_path_and_ld_preload_reach_the_program_not_the_script(fakes, tmp_path, mode):
    mine = tmp_path / "my bin"
    mine.mkdir()
    for tool in ("srun", "scontrol"):  # what the script would run with the program's PATH
        (mine / tool).write_text(f"#!/bin/sh\necho wrong {tool} >&2\nexit 97\n")
        (mine / tool).chmod(0o755)
    # torchrun's agent starts the program by name, with the program's PATH: the fakes'
    # python3 must be on it; srun mode's task prelude finds python3 with the job's PATH.
    path = f"{mine}:{tmp_path / 'bin'}" if mode == "torchrun" else f"{mine}"
    script = fakes.render(f"""\
        job: {{nodes: 2}}
        site: jsc
        launch: {{mode: {mode}, procs_per_node: 1}}
        env: {{set: {{PATH: "{path}", LD_PRELOAD: "", LD_LIBRARY_PATH: "/l 'q'"}}}}
        program: [python3, t.py]
        """)
    done = fakes.run(script)
    assert done.returncode == 0, done.stderr
    assert "wrong" not in done.stderr
    programs = fakes.records("python3")
    assert len(programs) == 2
    for rec in programs:
        assert rec["env"]["PATH"] == path and rec["env"]["LD_PRELOAD"] == ""
        assert rec["env"]["LD_LIBRARY_PATH"] == "/l 'q'"
    for rec in fakes.records("srun") + fakes.records("scontrol"):
        assert rec["env"]["PATH"] != path and "LD_PRELOAD" not in rec["env"]
