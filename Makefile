# Entry points: `make demo` (local cluster + image + jobs/ddp_container.job) and `make test`.
# Everything slow or root-needing lives in scripts/ and is idempotent.
SHELL := /bin/bash
VENV ?= $(CURDIR)/.venv
PY := $(VENV)/bin/python
export VENV

.PHONY: setup test test-times test-faults test-scale test-fast test-index spec-reference architecture torch-compat jobs image horovod-image launchers-image enroot-image horovod-enroot-image launchers-enroot-image cluster-up cluster-down demo bench

setup:
	bash scripts/setup.sh
	bash scripts/enroot-setup.sh

# Targets that need the project venv say so in one line on a fresh clone.
need_venv = @test -x $(PY) || { echo "make $@: no venv at $(VENV): run 'sudo make setup' first (or VENV=/path/to/venv with pytest and pyyaml)" >&2; exit 1; }

# Ring 1 and 2 only: no root, no cluster (needs a venv with pyyaml, pytest; torch optional).
test-fast:
	$(need_venv)
	$(PY) -m pytest -q -m "not ring3" tests

# The oldest supported torch runs the launcher's real two-node test in every `make test` (issue
# 30: a parser change broke 1.9 while `make torch-compat` sat outside CI); about 1.8 GB,
# pip-cached.
TORCH_OLDEST ?= 1.9.0
# pytest in three lanes (scripts/test-lanes.sh, tests/helpers/lanes.py): the lab's tests (a),
# the ring-3 tests that wait, on nodes of their own (b), and what needs no lab (c: torch
# $(TORCH_OLDEST), rings 1 and 2, the lab-free ring 3) run side by side. Strict: a missing
# prerequisite fails instead of skipping. The JUnit XML of the lanes stays in
# build/test-results/; what the run cost (total, per ring, the 10 slowest) is printed at the
# end, pass or fail; `make test-times` turns it into docs/development/test-times.md.
JUNIT := build/test-results/junit-a.xml build/test-results/junit-b.xml build/test-results/junit-c.xml
test: setup
	TORCH_OLDEST=$(TORCH_OLDEST) bash scripts/test-lanes.sh $(PY)

test-times:
	python3 tests/helpers/durations.py $(JUNIT) --page docs/development/test-times.md --commit "$$(git rev-parse --short HEAD)" $(if $(NOTE),--note "$(NOTE)")

# A 2-node job in the arm64 image on the lab's x86_64 nodes under qemu-user (issue 29): the
# image is multi-GB (PyPI's aarch64 torch is a CUDA build) and the job takes minutes, so not
# part of `make test`; run before landing a change to the images or the arch check.
test-arm64: setup
	$(MAKE) base-image ARCH=arm64
	$(PY) -m pytest -ra -p no:cacheprovider -m emulated tests/lab

# The lab at 64 nodes and torch jobs on 32-64 of them (issue 36): minutes and up to ~10 GB of
# memory, so not part of `make test` (which keeps a resize smoke, tests/lab/test_cluster_resize.py).
# The lab goes back to the size it had.
test-scale: setup
	$(PY) -m pytest -ra --durations=30 -p no:cacheprovider -m scale tests/lab

# The fault matrix (issue 41): the lab tests of failures (marker faults; about 20 minutes), then
# their table (tests/helpers/faultrows.py); GUIDE=1 puts it into docs/guide/spare-nodes.md with
# the date and commit. `make test` runs the same tests in lane b and prints their table too.
test-faults: setup
	rm -rf build/test-results/faults
	TORCHRUN_JSC_TESTS_STRICT=1 $(PY) -m pytest -ra -p no:cacheprovider -m "faults and not scale" tests/lab; \
	rc=$$?; python3 tests/helpers/faultrows.py build/test-results/faults $(if $(GUIDE),--guide docs/guide/spare-nodes.md --commit "$$(git rev-parse --short HEAD)") && exit $$rc

# docs/development/tests.md from the test files' docstrings (a ring 1 test fails while stale).
test-index:
	python3 tests/helpers/testindex.py

# docs/reference/spec.md's key tables from the keys' declarations (a ring 1 test fails while
# stale); the composer's Python (PyYAML) imports the declarations.
spec-reference:
	$(COMPOSER_PY) tests/helpers/specref.py

# launcher/'s modules, the imports between them, floors and cycles (docs/development/architecture.md).
architecture:
	python3 tests/helpers/architecture.py

# The launcher's real two-node test under older torch releases (own venvs in build/; several
# GB of CUDA wheels from PyPI, so not part of `make test`). TORCH_VERSIONS="2.4.1 ..." to pick.
TORCH_VERSIONS ?= 1.9.0 1.10.2 1.13.1 2.0.1 2.4.1 2.5.1
torch-compat: setup
	bash scripts/torch-compat.sh $(TORCH_VERSIONS)

# --- Images (containers/, scripts/build-image.sh, docs/development/containers.md) ---------
# ARCH=amd64|arm64 (default: this host's; x86_64/aarch64 accepted). A foreign ARCH builds
# under qemu-user-static, which scripts/build-image.sh registers (scripts/qemu-setup.sh).
# BASE=local (default on amd64, CI): Debian bookworm via debootstrap + the on-disk torch wheel.
# BASE=cuda (default on arm64: PyPI has no CPU torch for aarch64): Debian + torch's CUDA 13
#   and NCCL wheels from PyPI (requirements/cuda.txt); multi-GB, never part of `make test`.
# BASE=docker: pinned official PyTorch CUDA image (DOCKER_FROM=... to change it; x86_64 only).
# BASE=ngc: pinned NGC PyTorch image (NGC_FROM=...; multi-arch), the base that builds without
#   root (FAKEROOT=1; local and cuda need real root for debootstrap): JUPITER's login nodes.
# The base is cached in build/base-$(BASE).sif; image.sif is a thin launcher layer on it.
# Names: amd64 keeps image.sif & co.; BASE=cuda adds -cuda, arm64 adds -arm64
# (image-cuda.sif, image-cuda-arm64.sif, build/base-cuda-arm64.sif); `make image-names` says.
HOST_ARCH := $(shell dpkg --print-architecture 2>/dev/null || uname -m)
ARCH ?= $(HOST_ARCH)
override ARCH := $(patsubst x86_64,amd64,$(patsubst aarch64,arm64,$(ARCH)))
BASE ?= $(if $(filter arm64,$(ARCH)),cuda,local)
ASFX := $(if $(filter amd64,$(ARCH)),,-$(ARCH))
TAG := $(if $(filter cuda ngc,$(BASE)),-$(BASE))$(ASFX)
BASE_SIF := build/base-$(BASE)$(ASFX).sif
IMAGE_SIF := image$(TAG).sif
HOROVOD_SIF := horovod$(TAG).sif
LAUNCHERS_SIF := launchers$(TAG).sif
export ARCH
TORCH_WHEEL ?= /opt/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl
# Horovod on this base needs the -devel variant (nvcc, NCCL headers); on BASE=cuda nvcc comes
# from PyPI (requirements/cuda-nvcc.txt, build time only).
DOCKER_FROM ?= pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime
# NGC's tags are multi-arch; docker-archive:PATH or oci-archive:PATH take a local copy.
NGC_FROM ?= nvcr.io/nvidia/pytorch:25.12-py3
export TORCH_WHEEL DOCKER_FROM NGC_FROM
# DOCKERFILE=PATH: that Dockerfile converted (jsc-compose dockerfile) and built as Apptainer
# does, the launcher layer on top -> image-NAME.sif (NAME: the Dockerfile's directory, or
# DOCKERFILE_NAME; `make image-names DOCKERFILE=...` says); BASE does not apply (its FROM is
# the base), ARCH does. DOCKER_BUILD_ARGS='NAME=VALUE ...' (docker build --build-arg),
# FROM_LOCAL='IMAGE=SOURCE ...' (a FROM on a local copy: PATH.sif, docker-archive:PATH,
# oci-archive:PATH), DOCKER_CONTEXT=DIR (default: the Dockerfile's directory).
DOCKERFILE ?=
export DOCKER_BUILD_ARGS FROM_LOCAL DOCKER_CONTEXT DOCKERFILE_NAME
ifneq ($(strip $(DOCKERFILE)),)
DOCKERFILE_SIF := build/dockerfile-$(shell bash scripts/build-image.sh dockerfile-name '$(DOCKERFILE)')$(ASFX).sif
IMAGE_SIF := $(patsubst build/dockerfile-%,image-%,$(DOCKERFILE_SIF))
ifneq ($(filter horovod% launchers%,$(MAKECMDGOALS)),)
$(error make $(filter horovod% launchers%,$(MAKECMDGOALS)) builds on the kit's bases, not on DOCKERFILE=: install Horovod or the launchers in the Dockerfile)
endif
endif
BUILD_IMAGE := bash scripts/build-image.sh
LAUNCHER_SRC := pyproject.toml $(shell find launcher -name '*.py' -not -path '*/__pycache__/*' 2>/dev/null)
# The layers' build commands name their input and output only where they differ from the
# amd64 defaults (image.sif), so that `make image` runs exactly what it always ran.
TAG_ARGS = $(if $(TAG), $(1))

.PHONY: base-image image-names cuda-images test-arm64 FORCE
FORCE:

# wildcard: a missing wheel is reported by build-image.sh in one line, not as "No rule to make".
build/base-local$(ASFX).sif: containers/base-local.def containers/files/verbs_check.py $(wildcard $(TORCH_WHEEL))
	$(BUILD_IMAGE) base local
build/base-docker$(ASFX).sif: containers/base-docker.def containers/files/verbs_check.py build/docker-from.vars
	$(BUILD_IMAGE) base docker
build/base-cuda$(ASFX).sif: containers/base-cuda.def containers/files/verbs_check.py containers/files/cuda_check.py \
                            requirements/cuda.txt requirements/cuda-debian.txt
	$(BUILD_IMAGE) base cuda
build/base-ngc$(ASFX).sif: containers/base-ngc.def containers/files/verbs_check.py build/ngc-from.vars
	$(BUILD_IMAGE) base ngc
build/ngc-from.vars: FORCE
	@mkdir -p build
	@echo "NGC_FROM=$(NGC_FROM)" >$@.new
	@if cmp -s $@.new $@; then rm -f $@.new; else mv -f $@.new $@; fi
build/docker-from.vars: FORCE
	@mkdir -p build
	@echo "DOCKER_FROM=$(DOCKER_FROM)" >$@.new
	@if cmp -s $@.new $@; then rm -f $@.new; else mv -f $@.new $@; fi
base-image: $(BASE_SIF)
image-names:
	@$(if $(strip $(DOCKERFILE)),echo $(IMAGE_SIF),$(BUILD_IMAGE) paths $(BASE))

# Rewritten only when BASE or the recorded commit changes, so that labels stay true.
build/image$(TAG).vars: FORCE
	@mkdir -p build
	@printf '%s\n' "BASE=$(BASE)" "COMMIT=$$($(BUILD_IMAGE) commit)" >$@.new
	@if cmp -s $@.new $@; then rm -f $@.new; else mv -f $@.new $@; fi
build/horovod$(TAG).vars: FORCE
	@mkdir -p build
	@printf '%s\n' "BASE=$(BASE)" "HOST_OPENMPI=$$(dpkg-query -W -f='$${Version}' openmpi-bin 2>/dev/null)" >$@.new
	@if cmp -s $@.new $@; then rm -f $@.new; else mv -f $@.new $@; fi

ifeq ($(strip $(DOCKERFILE)),)
$(IMAGE_SIF): $(BASE_SIF) containers/pytorch.def containers/files/allreduce_check.py \
           $(LAUNCHER_SRC) build/image$(TAG).vars
	$(BUILD_IMAGE) image $(BASE)
else
# The script leaves the Dockerfile's image untouched while its definition, build context and
# local FROM files are unchanged; the launcher layer follows it as it follows a kit base.
$(DOCKERFILE_SIF): FORCE
	$(BUILD_IMAGE) dockerfile-base '$(DOCKERFILE)'
$(IMAGE_SIF): $(DOCKERFILE_SIF) containers/pytorch.def containers/files/allreduce_check.py \
           containers/files/verbs_check.py $(LAUNCHER_SRC) build/image$(TAG).vars
	$(BUILD_IMAGE) dockerfile-layer '$(DOCKERFILE)'
endif
image: $(IMAGE_SIF)

$(HOROVOD_SIF): $(BASE_SIF) containers/horovod.def containers/files/horovod_check.py \
             containers/files/horovod-build.sh build/horovod$(TAG).vars \
             $(if $(filter cuda,$(BASE)),requirements/cuda-nvcc.txt)
	$(BUILD_IMAGE) horovod $(BASE)
horovod-image: $(HOROVOD_SIF)

# accelerate, deepspeed, ray, submitit (requirements/launchers.txt) on image.sif, offline from a
# host-made wheelhouse; a layer of its own so image.sif stays as small and quick as it is.
$(LAUNCHERS_SIF): $(IMAGE_SIF) containers/launchers.def requirements/launchers.txt scripts/check-pins.py
	$(BUILD_IMAGE) launchers$(call TAG_ARGS,$(IMAGE_SIF) $(LAUNCHERS_SIF))
launchers-image: $(LAUNCHERS_SIF)

$(IMAGE_SIF:.sif=.sqsh): $(IMAGE_SIF)
	$(BUILD_IMAGE) enroot $(IMAGE_SIF) $(IMAGE_SIF:.sif=.sqsh)
enroot-image: $(IMAGE_SIF:.sif=.sqsh)
$(HOROVOD_SIF:.sif=.sqsh): $(HOROVOD_SIF)
	$(BUILD_IMAGE) enroot $(HOROVOD_SIF) $(HOROVOD_SIF:.sif=.sqsh)
horovod-enroot-image: $(HOROVOD_SIF:.sif=.sqsh)
$(LAUNCHERS_SIF:.sif=.sqsh): $(LAUNCHERS_SIF)
	$(BUILD_IMAGE) enroot $(LAUNCHERS_SIF) $(LAUNCHERS_SIF:.sif=.sqsh)
launchers-enroot-image: $(LAUNCHERS_SIF:.sif=.sqsh)

# The CUDA images of both architectures with their squashfs, and Horovod with NCCL for this
# host's architecture (several GB each, about N min here: docs/development/containers.md).
# Run before landing a change to base-cuda.def, requirements/cuda*.txt, horovod.def,
# containers/files/horovod-build.sh or scripts/build-image.sh; not part of `make test` or CI.
cuda-images:
	$(MAKE) enroot-image BASE=cuda ARCH=amd64
	$(MAKE) enroot-image BASE=cuda ARCH=arm64
	$(MAKE) horovod-image BASE=cuda ARCH=$(HOST_ARCH)

# --- Jobscripts (launcher composer, docs/guide/specs.md) ----------------------------------------
# Re-render every checked-in jobs/NAME.job from jobs/NAME.yaml (the golden tests compare them).
# The composer needs only Python with PyYAML: the venv when there is one, else python3.
COMPOSER_PY = $(if $(wildcard $(PY)),$(PY),python3)
jobs:
	@$(COMPOSER_PY) -c 'import yaml' 2>/dev/null || { echo "make jobs: needs Python 3 with PyYAML ($(COMPOSER_PY) -c 'import yaml' failed): pip install pyyaml (or pip install ., or sudo make setup)" >&2; exit 1; }
	@set -e; for spec in jobs/*.yaml; do \
	    $(COMPOSER_PY) -m launcher render "$$spec" -o "$${spec%.yaml}.job"; echo "rendered $${spec%.yaml}.job"; \
	done

# --- Local cluster (scripts/cluster.sh, docs/development/cluster.md) ---------------------
# Slurm with nodes jwb0001..jwb000N in network namespaces, a JSC-like network (hostname != rdzv name).
NODES ?=
cluster-up:
	bash scripts/cluster.sh up $(NODES)
cluster-down:
	bash scripts/cluster.sh down
# The user's path: submit the checked-in jobscript unchanged, wait, check rank 0's summary.
demo: setup cluster-up image
	$(PY) scripts/cluster/slurmjob.py jobs/ddp_container.job --timeout 600

# --- Bench (bench/, docs/development/benchmarks.md) ------------------------------------------
# Launch latency, failure teardown, container overhead, image build times, rendezvous
# scaling; ratios against baselines measured in the same run. Report: bench-results/results.md
bench: setup image cluster-up
	PYTHONPATH=$(CURDIR) $(PY) -m bench $(BENCH_ARGS)
