"""launcher.slurm: the rendezvous port rule, in Python and as the batch script's bash.

Ring 1: the rule's numbers and the preview. The bash lines against real listeners and under
the recording fakes: tests/fakes/test_slurm.py.
"""

from __future__ import annotations


import pytest

from launcher.render.preview import render_preview
from launcher.spec import parse_spec
from launcher.slurm import PORT_BASE, PORT_SPAN, rdzv_port


def test_the_rule():
    assert [rdzv_port(i) for i in (0, 1, 999, 1000, 4242, 1_234_567)] == \
        [29500, 29501, 30499, 29500, 29742, 30067]
    assert PORT_BASE + PORT_SPAN <= 32768  # below Linux's ephemeral ports


def test_the_preview_says_the_port_may_move():
    spec = parse_spec("job: {nodes: 2}\nsite: jsc\nprogram: [python3, t.py]\n", "x.yaml")
    text = render_preview(spec, "jwb[0001-0002]", job_id=4242, system="juwelsbooster")
    assert "# rendezvous endpoint jwb0001i:29742 (first node" in text
    assert "# (or the next port up that nothing on jwb0001 listens on yet" in text
    fixed = parse_spec("job: {nodes: 2}\nlaunch: {rdzv_port: 29400}\nprogram: [p]\n", "x.yaml")
    assert "next port up" not in render_preview(fixed, "jwb[0001-0002]", job_id=4242)
