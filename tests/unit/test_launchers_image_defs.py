"""Ring 1: the launchers layer's wiring (containers/launchers.def, scripts/build-image.sh,
Makefile), checked without building: offline from the host-made wheelhouse, the pins checked
in the image, one label per launcher, and `make launchers-image` never rebuilding on its own.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests.unit.test_image_defs import sections, script_args

REPO = Path(__file__).resolve().parents[2]
DEF = (REPO / "containers" / "launchers.def").read_text()
SCRIPT = (REPO / "scripts" / "build-image.sh").read_text()
LAUNCHERS = ("accelerate", "deepspeed", "ray", "submitit")


def test_layer_is_built_on_image_sif_not_the_base() -> None:
    assert re.search(r"^Bootstrap: localimage\nFrom: \{\{ BASE_SIF \}\}$", DEF, re.M)
    assert re.search(r"^\s+BASE_SIF=image\.sif$", sections(DEF)["arguments"], re.M)
    body = re.search(r"^cmd_launchers\(\) \{\n(.*?)^\}", SCRIPT, re.M | re.S).group(1)
    assert "local base=${1:-$repo/image.sif} out=${2:-$repo/launchers.sif}" in body
    assert "run_test" in body.split("commit_output")[0]  # %test passes before it replaces the old


def test_post_installs_offline_from_the_wheelhouse_without_ops() -> None:
    post = " ".join(sections(DEF)["post"].replace("\\\n", " ").split())
    assert ("DS_BUILD_OPS=0 PIP_BREAK_SYSTEM_PACKAGES=1 PIP_ROOT_USER_ACTION=ignore python3 -m pip "
            "install --no-index --find-links /opt/wheelhouse --no-build-isolation --no-cache-dir "
            "--disable-pip-version-check -r /opt/torchrun-jsc/launchers.txt") in post
    assert "rm -rf /opt/wheelhouse" in post
    files = sections(DEF)["files"]
    assert "{{ WHEELHOUSE }} /opt/wheelhouse" in files
    assert "{{ PINS }} /opt/torchrun-jsc/launchers.txt" in files


def test_wheelhouse_is_downloaded_on_the_host_wheels_only_but_deepspeed() -> None:
    body = re.search(r"^fill_launchers_wheelhouse\(\) \{\n(.*?)^\}", SCRIPT, re.M | re.S).group(1)
    assert '--no-deps --only-binary :all: --no-binary deepspeed -r "$LAUNCHERS_REQ"' in body
    assert "LAUNCHERS_REQ=$repo/requirements/launchers.txt" in SCRIPT
    # Refilled only when the pins change.
    assert 'stamp=$dir/.complete-$(md5sum <"$LAUNCHERS_REQ"' in body


def test_script_passes_the_pins_and_the_checker() -> None:
    assert script_args("launchers") == {"BASE_SIF", "BASE_DESC", "GIT_COMMIT", "WHEELHOUSE",
                                        "PINS", "CHECK_PINS"}


def test_labels_and_test_name_every_launcher() -> None:
    found = sections(DEF)
    for name in LAUNCHERS:
        assert f"org.torchrun-jsc.{name}-version " in found["post"]
        assert name in found["test"]
    assert "check-pins.py /opt/torchrun-jsc/launchers.txt" in found["test"]


def test_make_target_depends_on_image_and_pins() -> None:
    make = (REPO / "Makefile").read_text()
    rule = re.search(r"^\$\(LAUNCHERS_SIF\): (.*)\n\t(.*)$", make, re.M)
    assert rule, "Makefile: no $(LAUNCHERS_SIF) rule"
    assert rule.group(1).split() == ["$(IMAGE_SIF)", "containers/launchers.def",
                                     "requirements/launchers.txt", "scripts/check-pins.py"]
    assert rule.group(2) == "$(BUILD_IMAGE) launchers$(call TAG_ARGS,$(IMAGE_SIF) $(LAUNCHERS_SIF))"
    assert re.search(r"^launchers-image: \$\(LAUNCHERS_SIF\)$", make, re.M)
    assert "launchers-image" in re.search(r"^\.PHONY: (.*)$", make, re.M).group(1).split()


def test_make_dry_run_builds_image_then_launchers(tmp_path) -> None:
    out = subprocess.run(["make", "-n", "-B", "-C", str(REPO), "launchers.sif"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    lines = [ln for ln in out.splitlines() if ln.startswith("bash scripts/build-image.sh")]
    assert lines[-2:] == ["bash scripts/build-image.sh image local",
                          "bash scripts/build-image.sh launchers"]
