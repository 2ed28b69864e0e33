#!/usr/bin/env bash
# Install what the local cluster, the image builds and the tests need. Idempotent; root only.
# Debian bookworm host. Apptainer comes from Debian sid and needs trixie's glibc
# (see ../shared/machine.md); trixie and sid are pinned low so nothing else moves.
#
#   bash scripts/setup.sh [--plan] [--yes]
#     --plan  print what would change on this host, change nothing (no root needed)
#     --yes   do not ask (also SETUP_YES=1). Only a terminal on stdin outside CI is asked;
#             CI (CI=true) and scripts without a terminal go ahead.
# Before acting it says what it will change and why; apt and pip output goes to the log
# (SETUP_LOG, default build/logs/setup.log) and a short line per step to the terminal.
# SETUP_ROOT prefixes the apt and apptainer paths it writes or checks (tests only).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
venv=${VENV:-$here/.venv}
root=${SETUP_ROOT:-}
log=${SETUP_LOG:-$here/build/logs/setup.log}
apt_src=$root/etc/apt/sources.list.d/torchrun-jsc-trixie-sid.sources
apt_pref=$root/etc/apt/preferences.d/torchrun-jsc-trixie-sid
apt_stamp=$root/var/lib/apt/torchrun-jsc-updated
apptainer_conf=$root/etc/apptainer/apptainer.conf

apt_packages=(munge squashfs-tools debootstrap shellcheck iproute2 util-linux procps psmisc cmake
              g++ make libcap2-bin mariadb-server
              libibverbs1 ibverbs-providers  # the doctor's rdma tests load the real verbs library
              docker-registry skopeo)  # registry images with an ENTRYPOINT, imported by Enroot
                                       # (tests/helpers/entrypoint_images.py); no daemon started
# Slurm: the series sites run today, Debian trixie's 24.11, unless LAB_SLURM=22.05 (bookworm's;
# on a fresh machine only: setup never downgrades). slurmdbd with MariaDB for accounting; the
# MariaDB server stays bookworm's 10.11 (in apt_packages): trixie's 11.8.9 makes 24.11.5's
# slurmdbd die at start ("_check_mysql_concat_is_sane: null result"). Open MPI and PMIx follow
# the Slurm series (24.11 links trixie's PMIx 5, which replaces bookworm's 4).
lab_slurm=${LAB_SLURM:-24.11}
slurm_packages=(slurm-wlm slurmctld slurmd slurm-client slurmdbd openmpi-bin libopenmpi-dev libpmix-dev)
glibc_trixie=(libc6 libc-bin libc6-dev libc-dev-bin base-files dpkg-dev libdpkg-perl)
# mkdocs: tests/unit/test_docs.py builds the docs site (mkdocs.yml) with --strict.
# lightning: tests/lab/test_lightning.py runs a real Lightning program's own SLURM requeue.
# spython: the composer's `dockerfile` command (pyproject.toml pins the same version).
# hypothesis: tests/unit/test_bounded_input.py's fuzz tests (pyproject's test extra, same pin).
venv_packages=('torch==2.13.0' 'pyyaml>=6' 'pytest>=7' numpy 'mkdocs==1.6.1' 'lightning==2.6.6' 'spython==0.3.14' 'hypothesis==6.170.17')
# accelerate, deepspeed, ray, submitit and what they pull in, pinned (issue 12's launch modes).
launchers_req=$here/requirements/launchers.txt

die() { echo "setup: $*" >&2; exit 1; }

case $lab_slurm in
    24.11) slurm_suite=trixie ;;
    22.05) slurm_suite=bookworm ;;
    *) die "LAB_SLURM: expected 24.11 (Debian trixie, the default) or 22.05 (bookworm), got '$lab_slurm'" ;;
esac

plan_only=0
yes=${SETUP_YES:-0}
for arg in "$@"; do
    case $arg in
        --plan) plan_only=1 ;;
        --yes|-y) yes=1 ;;
        *) die "unknown option '$arg': usage: setup.sh [--plan] [--yes]" ;;
    esac
done

# --- What is missing (read-only) ----------------------------------------------------------
missing=()
for p in "${apt_packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
# Slurm of the wanted series, every package of it; a newer series than asked is never downgraded.
slurm_have=$(dpkg-query -W -f='${Version}' slurm-client 2>/dev/null || true)
slurm_have=${slurm_have%%-*}
need_slurm=0
for p in "${slurm_packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need_slurm=1
done
case $slurm_have in
    "") need_slurm=1 ;;
    "$lab_slurm".*) ;;
    *) if [ "$lab_slurm" = 22.05 ]; then
           die "LAB_SLURM=22.05, but Slurm $slurm_have is installed: setup never downgrades (use a fresh machine)"
       fi
       need_slurm=1 ;;
esac
need_apptainer=0
command -v apptainer >/dev/null || need_apptainer=1
need_config=0
grep -q '^root default capabilities = file' "$apptainer_conf" 2>/dev/null || need_config=1
need_fuse=0
if [ -c "$root/dev/fuse" ] && [ "$(stat -c %a "$root/dev/fuse")" != 666 ]; then need_fuse=1; fi
need_venv=0
# An existing venv that lacks one (e.g. mkdocs, added later) gets the list again: pip skips
# what is installed, so only the missing package is downloaded.
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import torch, yaml, pytest, mkdocs, importlib.util as u
assert u.find_spec("lightning") and u.find_spec("spython") and u.find_spec("hypothesis")' 2>/dev/null; then
    need_venv=1
fi
# Exactly the pinned versions, checked in a tenth of a second: nothing is reinstalled when they are.
need_launchers=0
# Decided by the pins alone while the venv exists, so that a venv completed by one package
# does not reinstall the launchers.
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" "$here/scripts/check-pins.py" --quiet "$launchers_req" 2>/dev/null; then
    need_launchers=1
fi

print_plan() {
    echo "setup: this will change the host:"
    if [ "${#missing[@]}" -gt 0 ]; then
        echo "  - apt (bookworm): ${missing[*]}"
        echo "      munge and MariaDB for the local cluster, image builds (debootstrap, squashfs), tests (shellcheck)"
    fi
    if [ "$need_slurm" = 1 ]; then
        echo "  - apt ($slurm_suite): Slurm $lab_slurm: ${slurm_packages[*]}${slurm_have:+ (replaces Slurm $slurm_have)}"
        echo "      the local cluster with accounting (slurmdbd on MariaDB); Open MPI and PMIx follow Slurm's series"
        if [ "$slurm_suite" = trixie ]; then
            echo "      with systemd from trixie: Slurm 24.11's packages declare their user in a form bookworm's systemd-sysusers rejects"
        fi
        [ -n "$slurm_have" ] ||
            echo "  - /etc/slurm: created by slurm-wlm; 'make cluster-up' later writes slurm.conf, slurmdbd.conf, gres.conf, mpi.conf there"
    fi
    if [ "$need_apptainer" = 1 ] || { [ "$need_slurm" = 1 ] && [ "$slurm_suite" = trixie ]; }; then
        echo "  - apt sources: ${apt_src#"$root"} and ${apt_pref#"$root"} (Debian trixie + sid, pinned to priority 100/50)"
        echo "      Slurm 24.11 comes from trixie, Apptainer only from sid; the low pins keep every other package on bookworm"
    fi
    if [ "$need_apptainer" = 1 ]; then
        echo "  - glibc from Debian trixie: ${glibc_trixie[*]}"
        echo "      sid's apptainer needs a newer glibc than bookworm's 2.36"
        echo "  - apt (sid): apptainer"
    fi
    if [ "$need_config" = 1 ]; then
        echo "  - ${apptainer_conf#"$root"}: 'root default capabilities = file' plus root's capabilities"
        echo "      so that root apptainer works where the bounding set lacks some (scripts/apptainer-config.sh)"
    fi
    if [ "$need_fuse" = 1 ]; then
        echo "  - /dev/fuse: mode 0666, what Debian's fuse3 udev rule sets (this host has no udev)"
        echo "      ordinary users' apptainer mounts images with squashfuse through it"
    fi
    if [ "$need_venv" = 1 ]; then
        echo "  - $venv: a venv with ${venv_packages[*]} (torch 2.13 CPU; a download of several hundred MB)"
        echo "      the tests, make bench and make demo run in it"
    fi
    if [ "$need_launchers" = 1 ]; then
        echo "  - $venv: accelerate, deepspeed, ray, submitit as pinned in requirements/launchers.txt (about 580 MB with Ray Train's pandas and pyarrow)"
        echo "      the accelerate, deepspeed, ray and submitit launch modes; torch and numpy stay as installed"
    fi
    echo "  apt and pip output: $log"
}

nothing_to_do() {
    [ "${#missing[@]}" = 0 ] && [ "$need_slurm" = 0 ] && [ "$need_apptainer" = 0 ] && [ "$need_config" = 0 ] &&
        [ "$need_fuse" = 0 ] && [ "$need_venv" = 0 ] && [ "$need_launchers" = 0 ]
}

if [ "$plan_only" = 1 ]; then
    if nothing_to_do; then echo "setup: nothing to install"; else print_plan; fi
    exit 0
fi

if [ "$(id -u)" != 0 ]; then
    die "must run as root (apt-get, /etc/apptainer); rerun with sudo (bash scripts/setup.sh --plan shows what it would change)"
fi

is_ci() { [ -n "${CI:-}" ] && [ "${CI:-}" != false ] && [ "${CI:-}" != 0 ]; }

confirm() {
    [ "$yes" = 1 ] && return 0
    { [ -t 0 ] && ! is_ci; } || return 0  # CI, pipes, cron: nobody to ask
    local answer
    read -r -p "setup: go ahead? [y/N] " answer || answer=
    case $answer in
        y|Y|yes|YES) ;;
        *) die "nothing changed (answer was not yes); --yes or SETUP_YES=1 skips this question" ;;
    esac
}

mkdir -p "$(dirname "$log")"

# step TITLE CMD...: one line on the terminal, the output in the log, its tail on failure.
step() {
    local title=$1
    shift
    echo "setup: $title"
    echo "=== $(date -u +%Y-%m-%dT%H:%M:%SZ) $title: $*" >>"$log"
    if ! "$@" >>"$log" 2>&1; then
        tail -n 5 "$log" >&2
        die "$title failed (full log: $log)"
    fi
}

add_trixie_sid() {
    [ -f "$apt_src" ] && [ -f "$apt_pref" ] && return 0
    mkdir -p "$(dirname "$apt_src")" "$(dirname "$apt_pref")"
    cat >"$apt_src" <<'SRC'
Types: deb
URIs: http://deb.debian.org/debian
Suites: trixie sid
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
    cat >"$apt_pref" <<'PREF'
Package: *
Pin: release n=trixie
Pin-Priority: 100

Package: *
Pin: release n=sid
Pin-Priority: 50
PREF
    rm -f "$apt_stamp"
}

apt_update_once() {
    [ -f "$apt_stamp" ] && return 0
    apt-get update -qq
    mkdir -p "$(dirname "$apt_stamp")"
    touch "$apt_stamp"
}

apt_install() {
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=600 \
        --no-install-recommends "$@"
}

make_venv() {
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --upgrade pip
    "$venv/bin/pip" install -q "${venv_packages[@]}"
}

# The pins, with the venv's torch and numpy held where they are. deepspeed is an sdist whose
# setup.py imports torch: --no-build-isolation builds it with the venv's torch and setuptools,
# DS_BUILD_OPS=0 as pure Python (its ops compile on first use, where a compiler is).
install_launchers() {
    local cons
    cons=$(mktemp)
    "$venv/bin/python" -c 'from importlib.metadata import version as v
for name in ("torch", "numpy"): print(f"{name}=={v(name)}")' >"$cons" || { rm -f "$cons"; return 1; }
    DS_BUILD_OPS=0 "$venv/bin/pip" install -q --no-build-isolation -c "$cons" -r "$launchers_req" ||
        { rm -f "$cons"; return 1; }
    rm -f "$cons"
}

installed=1
if nothing_to_do; then
    installed=0
else
    print_plan
    confirm
    need_trixie=$need_apptainer
    [ "$need_slurm" = 1 ] && [ "$slurm_suite" = trixie ] && need_trixie=1
    if [ "$need_trixie" = 1 ]; then step "apt sources for trixie and sid (pinned low)" add_trixie_sid; fi
    if [ "${#missing[@]}" -gt 0 ] || [ "$need_slurm" = 1 ] || [ "$need_trixie" = 1 ]; then
        step "apt-get update" apt_update_once
    fi
    if [ "$need_slurm" = 1 ] && [ "$slurm_suite" = trixie ]; then
        step "systemd from trixie (for Slurm 24.11's package scripts)" apt_install -t trixie systemd
        step "Slurm $lab_slurm from trixie" apt_install -t trixie "${slurm_packages[@]}"
    elif [ "$need_slurm" = 1 ]; then
        step "Slurm $lab_slurm from bookworm" apt_install "${slurm_packages[@]}"
    fi
    if [ "${#missing[@]}" -gt 0 ]; then
        step "apt-get install (${#missing[@]} packages)" apt_install "${missing[@]}"
    fi
    if [ "$need_apptainer" = 1 ]; then
        step "glibc from trixie (for sid's apptainer)" apt_install -t trixie "${glibc_trixie[@]}"
        step "apptainer from sid" apt_install apptainer/sid
    fi
    if [ "$need_venv" = 1 ]; then step "venv $venv with torch 2.13 (several minutes)" make_venv; fi
    if [ "$need_launchers" = 1 ]; then
        step "launchers into $venv (requirements/launchers.txt)" install_launchers
    fi
fi
# Both are quick and idempotent; they also run when nothing had to be installed.
step_quiet() { "$@" >>"$log" 2>&1 || { tail -n 5 "$log" >&2; die "$* failed (full log: $log)"; }; }
step_quiet "$here/scripts/apptainer-config.sh"
step_quiet "$venv/bin/pip" install -q --no-deps -e "$here"
# Versions from dpkg, never from the daemons' clients: `sinfo --version` needs a slurm.conf,
# which a fresh machine has only after `make cluster-up` (setup must not ask a service that
# set-up itself configures later).
slurm_version=$(dpkg-query -W -f='${Version}' slurm-client 2>/dev/null || true)
slurm_version=${slurm_version%%-*}
versions="venv $venv, $(apptainer --version), slurm ${slurm_version:-not installed}"
if [ "$installed" = 1 ]; then
    echo "setup: ok ($versions)"
else
    echo "setup: nothing to install ($versions)"
fi
