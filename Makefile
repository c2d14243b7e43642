# The entry points: `make demo` (the main job: train an MLP on the handwritten digits),
# `make tour` (the seed documents' examples), `make test` (lint, then the suite) and `make lint`
# (ruff's checks and its formatting, checked, not applied: `make format` applies it). Each creates .venv
# with the pinned dependencies, the test and demo extras included, when it is missing, and
# reinstalls when pyproject.toml or this file changes.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.kiln-installed

.PHONY: demo tour test lint format fuzz bench clean

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,demo]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m kiln.examples.digits_mlp

tour: $(STAMP)
	$(PY) -m kiln.examples.tour

LINTED := kiln tests benchmarks

lint: $(STAMP)
	$(VENV)/bin/ruff check $(LINTED)
	$(VENV)/bin/ruff format --check $(LINTED)

format: $(STAMP)
	$(VENV)/bin/ruff format $(LINTED)
	$(VENV)/bin/ruff check --fix $(LINTED)

test: $(STAMP) lint
	$(PY) -m pytest -n 2 tests

# The differential fuzz tests of `make test`, with many more random programs each.
FUZZ_EXAMPLES ?= 1000
fuzz: $(STAMP)
	KILN_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(PY) -m pytest -n 2 tests/test_fuzz_programs.py

bench: $(STAMP)
	$(PY) benchmarks/run_all.py

clean:
	rm -rf $(VENV) build *.egg-info
