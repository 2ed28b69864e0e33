"""Ring 1: site jsc's inter-node name per system (launcher/features/site.py, model.JSC_SUFFIXES):
the table and its order, the rendered batch lines (quoted, the same rule in the jobscript,
deepspeed's hostfile and Ray's --suffix), `preview` showing what each system gets (or one
system, --system / $SYSTEMNAME), and a spec's own hostname_suffix replacing the rule.

Running the lines with a fake getent is ring 2 (tests/fakes/test_internode.py).
"""

import re

import pytest

from launcher.cli import main
from launcher.features.site import preview_endpoint, suffix_lines
from launcher.modes.common import SUFFIX, suffix_token
from launcher.render.jobscript import render_jobscript
from launcher.model import JSC_SUFFIXES, SITE_PROFILES, FastInterface, Site, SuffixRule
from launcher.render.preview import render_preview
from launcher.shell import render_statement
from tests.unit.test_spec_traps import error, parse

IC = "-interconnect-1.jupiter.internal"
JSC = "job: {nodes: 2}\nsite: jsc\nlaunch: {rdzv_port: 29400}\nprogram: [p]\n"


def test_the_table_names_every_jsc_system_and_tries_i_first():
    assert dict(JSC_SUFFIXES.systems) == {
        "juwels": "i", "juwelsbooster": "i", "jurecadc": "i", "jusuf": "i",
        "jupiter": IC, "jedi": IC}
    assert JSC_SUFFIXES.candidates == ("i", IC)  # the order tried without a listed system
    assert JSC_SUFFIXES.groups == ((("juwels", "juwelsbooster", "jurecadc", "jusuf"), "i"),
                                   (("jupiter", "jedi"), IC))
    assert SITE_PROFILES["jsc"].hostname_suffix is JSC_SUFFIXES
    assert SITE_PROFILES["generic"].hostname_suffix == FastInterface()


def test_jsc_renders_the_rule_at_batch_scope():
    text = render_jobscript(parse(JSC))
    assert (
        'case "${SYSTEMNAME:-}" in\n'
        "    juwels|juwelsbooster|jurecadc|jusuf) host_suffixes=(i) ;;\n"
        f"    jupiter|jedi) host_suffixes=({IC}) ;;\n"
        f"    *) host_suffixes=(i {IC}) ;;\n"
        "esac\n"
        'jsc_pick_host_suffix "$first_node" "${host_suffixes[@]}" || exit 1\n'
        'rdzv_host="${first_node}${host_suffix}"\n') in text
    # the lookup is the kit's (launcher/node/job.sh), never written into the script
    assert text.count("jsc_pick_host_suffix") == 1 and "getent hosts" not in text
    # after the first node is known, before anything uses the name
    assert text.index("jsc_first_node") < text.index("jsc_pick_host_suffix") < \
        text.index("rdzv_host=") < text.index("rdzv_port", text.index("rdzv_host="))


@pytest.mark.parametrize("site, line", [
    ("{profile: jsc, hostname_suffix: -ib}", 'rdzv_host="${first_node}-ib"'),
    ("{profile: jsc, hostname_suffix: ''}", 'rdzv_host="${first_node}"'),
    ("{profile: generic, hostname_suffix: ''}", 'rdzv_host="${first_node}"'),
    ("{profile: generic, hostname_suffix: i}", 'rdzv_host="${first_node}i"'),
])
def test_a_fixed_suffix_replaces_the_rule(site, line):
    spec = parse(JSC.replace("site: jsc", f"site: {site}"))
    assert isinstance(spec.site.hostname_suffix, str)
    text = render_jobscript(spec)
    assert line in text.splitlines()
    assert "getent" not in text and "SYSTEMNAME" not in text
    assert suffix_lines(spec.site) == [] and suffix_token(spec.site) == spec.site.hostname_suffix


@pytest.mark.parametrize("site, message", [
    ("{profile: jsc, hostname_suffix: [i]}",
     "x.yaml: site.hostname_suffix: must be a string, got ['i']"),
    ("{profile: jsc, hostname_suffix: 'i $(id)'}",
     "x.yaml: site.hostname_suffix: must be letters, digits, '.' or '-', got 'i $(id)'"),
])
def test_a_bad_suffix_is_one_line(site, message):
    assert error(JSC.replace("site: jsc", f"site: {site}")) == message


def test_the_modes_take_the_suffix_the_job_picked():
    """deepspeed's hostfile and Ray's agents use $host_suffix, never a fixed 'i'."""
    ds = render_jobscript(parse(JSC.replace("{rdzv_port: 29400}",
                                            "{mode: deepspeed, rdzv_port: 29400}")))
    assert 'ds_suffix="${host_suffix}"' in ds.splitlines()
    ray = render_jobscript(parse(JSC.replace("{rdzv_port: 29400}",
                                             "{mode: ray, rdzv_port: 29400}")))
    assert '"--suffix=${host_suffix}"' in ray
    assert suffix_token(parse(JSC).site) == SUFFIX


def test_rule_values_are_quoted_and_system_names_checked():
    odd = Site("odd", hostname_suffix=SuffixRule((("sys-1", "a b"), ("sys2", "$(id)"))))
    text = "\n".join(render_statement(s) for s in suffix_lines(odd))
    assert "    sys-1) host_suffixes=('a b') ;;" in text
    assert "    sys2) host_suffixes=('$(id)') ;;" in text
    assert "    *) host_suffixes=('a b' '$(id)') ;;" in text
    bad = Site("bad", hostname_suffix=SuffixRule((("a|b", "i"),)))
    with pytest.raises(ValueError, match="not a SYSTEMNAME: 'a|b'"):
        suffix_lines(bad)


def test_preview_shows_what_each_system_gets():
    text = render_preview(parse(JSC), "jpbo-001-[01-02]", job_id=7)
    assert ("# rendezvous endpoint ${rdzv_host}:29400, rdzv_id 7: the first node's inter-node "
            "name, chosen when the job starts (site profile jsc):\n"
            "#   SYSTEMNAME juwels, juwelsbooster, jurecadc, jusuf: jpbo-001-01i:29400\n"
            f"#   SYSTEMNAME jupiter, jedi: jpbo-001-01{IC}:29400\n"
            "#   SYSTEMNAME unset or another: the first of jpbo-001-01i, "
            f"jpbo-001-01{IC} that resolves there\n") in text
    # the node lines show the run-time value, not a guess
    assert "--rdzv_endpoint=${rdzv_host}:29400" in text and "jpbo-001-01i:29400 " not in text


@pytest.mark.parametrize("system, host", [
    ("jupiter", f"jpbo-001-01{IC}"), ("jedi", f"jpbo-001-01{IC}"),
    ("juwelsbooster", "jpbo-001-01i"), ("jusuf", "jpbo-001-01i"),
])
def test_preview_of_one_system(system, host):
    text = render_preview(parse(JSC), "jpbo-001-[01-02]", job_id=7, system=system)
    suffix = host[len("jpbo-001-01"):]
    assert f"# rendezvous endpoint {host}:29400 (first node + {suffix!r} for SYSTEMNAME " \
        f"{system}, site profile jsc), rdzv_id 7\n" in text
    assert text.count(f"--rdzv_endpoint={host}:29400") == 2 and "${rdzv_host}" not in text


def test_preview_of_a_system_not_listed_and_of_a_fixed_suffix():
    host, lines = preview_endpoint(parse(JSC).site, "n1", 29400, 7, "deep")
    assert host is None and "#   SYSTEMNAME deep (not listed): the first of n1i, " \
        f"n1{IC} that resolves there" in lines
    fixed = parse(JSC.replace("site: jsc", "site: {profile: jsc, hostname_suffix: -ib}"))
    assert preview_endpoint(fixed.site, "n1", 29400, 7, "jupiter") == (
        "n1-ib", ["# rendezvous endpoint n1-ib:29400 (first node + site suffix '-ib'), "
                  "rdzv_id 7"])


def test_cli_preview_system_option_and_default(capsys, monkeypatch, tmp_path):
    spec = tmp_path / "t.yaml"
    spec.write_text(JSC)
    monkeypatch.delenv("SYSTEMNAME", raising=False)
    args = ["preview", str(spec), "--nodelist", "jpbo-001-[01-02]"]
    assert main(args) == 0
    assert "SYSTEMNAME jupiter, jedi:" in capsys.readouterr().out
    assert main(args + ["--system", "jupiter"]) == 0
    assert f"--rdzv_endpoint=jpbo-001-01{IC}:29400" in capsys.readouterr().out
    monkeypatch.setenv("SYSTEMNAME", "jedi")  # as on a JSC login node
    assert main(args) == 0
    assert f"--rdzv_endpoint=jpbo-001-01{IC}:29400" in capsys.readouterr().out
    assert main(args + ["--system", "juwelsbooster"]) == 0  # the option wins
    assert re.search(r"--rdzv_endpoint=jpbo-001-01i:29400\b", capsys.readouterr().out)
