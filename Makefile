# slurm-ml: two commands do all setup on a fresh Debian 12 or 13 machine (as root):
#   make demo   bring up the real dev cluster and run a sample workload
#   make test   lint + type-check + layering, unit tests, integration tests on the dev cluster
#   make check  lint + type-check + layering and the unit tests: no cluster, under 3 minutes
SHELL := /bin/bash
VENV ?= .venv
STATE ?= $(CURDIR)/.devcluster
BIN := $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: all venv cluster demo test check coverage lint unit integration down destroy clean \
	engine engine-down test-compose test-debian13

all: test

$(BIN)/.installed: pyproject.toml
	@command -v python3 >/dev/null && python3 -c 'import venv, ensurepip' 2>/dev/null || \
	  { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3 python3-venv python3-pip; }
	python3 -m venv $(VENV)
	$(BIN)/pip install -q -U pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

venv: $(BIN)/.installed

cluster: venv
	$(BIN)/slurm-ml devcluster up --state-dir $(STATE)

demo: cluster
	$(BIN)/slurm-ml devcluster demo --state-dir $(STATE)

lint: venv
	$(BIN)/ruff check slurm_ml tests
	$(BIN)/mypy slurm_ml
	$(BIN)/lint-imports

unit: venv
	$(BIN)/pytest -m 'not integration' $(PYTEST_ARGS)

integration: cluster
	source $(STATE)/env.sh && $(BIN)/pytest -m integration $(PYTEST_ARGS)

# The integration tests in two shards at once, on this cluster and a second one that
# devcluster/test-all.sh brings up in $(STATE)-b and down again, the unit and compose tests
# beside them (most of the integration run waits on Slurm and real time);
# SLURM_ML_TEST_SERIAL=1 runs one pytest over everything, on this cluster, instead.
test: lint cluster
	source $(STATE)/env.sh && devcluster/test-all.sh $(BIN)/pytest $(PYTEST_ARGS)

# Before a commit or a push: what needs no cluster, spread over every core. tests/compose
# is left out too (where a Docker engine answers it builds images and starts a compose
# cluster), and so are the unit tests marked slow (whole simulated weeks), which `make
# unit` and `make test` run.
check: lint
	$(BIN)/pytest -n auto -m 'not integration and not compose and not slow' $(PYTEST_ARGS)

# The unit tests' line coverage of slurm_ml against its floor (pyproject.toml
# [tool.coverage.report] fail_under). Python 3.11's tracer makes the tests about four
# times slower (4.5 minutes on 2 cores), so this is neither part of `make check` nor run
# beside the integration tests, whose timing it would crowd; CI (.ci/run) runs it after
# `make test`.
coverage: venv
	$(BIN)/pytest -n auto -m 'not integration and not compose and not slow' \
	  --cov --cov-report=term $(PYTEST_ARGS)

# The container routes (docs/admin.md): a Docker engine with no registry, then the compose
# cluster built from host wheels and tested end to end (~15 minutes on 2 cores).
engine:
	devcluster/engine.sh up

engine-down:
	devcluster/engine.sh down

test-compose: venv engine
	$(BIN)/pytest -m compose tests/compose $(PYTEST_ARGS)

# Debian 13 / Slurm 24.11: the dev cluster, unchanged, in a trixie container on an internal
# network, and the whole integration suite run there (devcluster/debian13.sh, docs/admin.md).
test-debian13: venv engine
	devcluster/debian13.sh $(PYTEST_ARGS)

# The second cluster make test brings up ($(STATE)-b, normally down again already) first:
# it may use the munged the first one started.
down:
	[ ! -d $(STATE)-b ] || $(BIN)/slurm-ml devcluster down --state-dir $(STATE)-b
	$(BIN)/slurm-ml devcluster down --state-dir $(STATE)

destroy:
	[ ! -d $(STATE)-b ] || $(BIN)/slurm-ml devcluster down --destroy --state-dir $(STATE)-b
	$(BIN)/slurm-ml devcluster down --destroy --state-dir $(STATE)

clean: destroy
	rm -rf $(VENV) *.egg-info .mypy_cache .ruff_cache .pytest_cache .coverage .coverage.*
