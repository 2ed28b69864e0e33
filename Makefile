# Entry points: `make demo` (local cluster + image + jobs/ddp_container.job) and `make test`.
# Everything slow or root-needing lives in scripts/ and is idempotent.
SHELL := /bin/bash
VENV ?= $(CURDIR)/.venv
PY := $(VENV)/bin/python
export VENV

.PHONY: setup test test-fast jobs image horovod-image enroot-image cluster-up cluster-down demo bench

setup:
	bash scripts/setup.sh

# Ring 1 and 2 only: no root, no cluster (needs a venv with pyyaml, pytest; torch optional).
test-fast:
	$(PY) -m pytest -q -m "not ring3" tests

test: setup
	$(PY) -m pytest -ra tests
