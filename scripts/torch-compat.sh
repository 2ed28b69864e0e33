#!/usr/bin/env bash
# Run the launcher's real two-node test (tests/lab/test_torchrun_jsc_real.py) under older torch
# releases, each in its own virtual environment under build/torch-compat/VERSION.
#
#   bash scripts/torch-compat.sh [VERSION...]     # default: 1.9.0 1.10.2 1.13.1 2.0.1 2.4.1 2.5.1
#
# Why these: 1.9 is the first torchrun (no is_host in --rdzv_conf: compat patches the hostname
# match); 1.13 is the last 1.x; 2.0 publishes the agent's FQDN as MASTER_ADDR; 2.4 builds it in
# RendezvousStoreInfo.build; 2.5 is the first with --local_addr (no patch at all).
# Not part of `make test`: PyPI has only CUDA builds of these releases (1.7-5 GB per venv with
# their nvidia-* wheels), too much for every CI run. Needs root (namespaces) and `make setup`.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
prog=torch-compat.sh
die() { echo "$prog: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root (the test builds network namespaces)"
[ -x "$repo/.venv/bin/pytest" ] || die "no $repo/.venv: run 'make setup' first"

python_minor() {  # the newest Python a release supports (1.13 has 3.11 wheels that fail)
    case $1 in
        1.9.*) echo 3.8 ;;  # the oldest Python the images have (NGC 21.xx: 3.8)
        1.10.*) echo 3.9 ;;
        1.*) echo 3.10 ;;
        2.*) echo 3.11 ;;
        *) die "unsupported torch version '$1' (accepted: 1.9.x .. 2.x)" ;;
    esac
}

python_for() {  # python_for TORCH X.Y: a working pythonX.Y (pyenv shims exist but may fail)
    local want=$2 c
    for c in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$want".*/bin/"python$want" \
             "$(command -v "python$want" 2>/dev/null || true)"; do
        if [ -n "$c" ] && "$c" -c 'import venv' >/dev/null 2>&1; then echo "$c"; return 0; fi
    done
    die "torch $1 needs python$want, which is not installed"
}

# glibc >= 2.41 (trixie's, which the lab's Apptainer needs) refuses to load a library that
# asks for an executable stack, as torch 1.10's libtorch_cpu.so does ("cannot enable
# executable stack"); this tunable restores the old behaviour for these processes only.
export GLIBC_TUNABLES="${GLIBC_TUNABLES:+$GLIBC_TUNABLES:}glibc.rtld.execstack=2"
versions=("$@")
[ ${#versions[@]} -gt 0 ] || versions=(1.9.0 1.10.2 1.13.1 2.0.1 2.4.1 2.5.1)
failed=()
for v in "${versions[@]}"; do
    [[ "$v" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "bad torch version '$v' (accepted: X.Y.Z, e.g. 2.4.1)"
    venv=$repo/build/torch-compat/$v
    minor=$(python_minor "$v")
    check="import sys, torch; sys.exit(torch.__version__.split('+')[0] != '$v' or
                                      '%d.%d' % sys.version_info[:2] != '$minor')"
    if ! "$venv/bin/python" -c "$check" 2>/dev/null; then
        echo "$prog: torch $v: creating $venv" >&2
        rm -rf "$venv"
        "$(python_for "$v" "$minor")" -m venv "$venv"
        # numpy < 2: the releases before 2.3 were built against numpy 1.x
        "$venv/bin/pip" install -q "torch==$v" "numpy<2" || die "pip could not install torch==$v"
    fi
    echo "$prog: torch $v: tests/lab/test_torchrun_jsc_real.py" >&2
    if TORCHRUN_JSC_TEST_PYTHON=$venv/bin/python "$repo/.venv/bin/pytest" -q -p no:cacheprovider \
            "$repo/tests/lab/test_torchrun_jsc_real.py"; then
        echo "$prog: torch $v: passed"
    else
        echo "$prog: torch $v: FAILED"
        failed+=("$v")
    fi
done
[ ${#failed[@]} -eq 0 ] || die "failed for torch ${failed[*]}"
echo "$prog: all passed: ${versions[*]}"
