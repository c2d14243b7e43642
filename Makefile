# The entry points: `make demo` (the main job: train an MLP on the handwritten digits),
# `make tour` (the seed documents' examples), `make test` (lint, then the suite) and `make lint`
# (ruff's checks and its formatting, checked, not applied: `make format` applies it). Each creates .venv
# with the pinned dependencies, the test and demo extras included, when it is missing, and
# reinstalls when pyproject.toml or this file changes.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.kiln-installed

.PHONY: demo tour test test-interpret lint format fuzz bench bytecode clean

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,demo]'
	touch $(STAMP)

# The package's bytecode, written as an installed package's is (the editable install writes
# none, and a process that cannot write __pycache__ would compile every module it imports, the
# lazily imported compiler included, again on each start): only changed files are recompiled.
# Then the host's kernel library (kiln/runtime/kernel_library.py: the product kernels every
# program calls), built once into kiln/_prebuilt rather than in each process that needs it.
bytecode: $(STAMP)
	$(PY) -m compileall -q kiln > /dev/null
	$(PY) -m kiln.runtime.kernel_library

demo: $(STAMP) bytecode
	$(PY) -m kiln.examples.digits_mlp

tour: $(STAMP) bytecode
	$(PY) -m kiln.examples.tour

LINTED := kiln tests benchmarks

lint: $(STAMP)
	$(VENV)/bin/ruff check $(LINTED)
	$(VENV)/bin/ruff format --check $(LINTED)

format: $(STAMP)
	$(VENV)/bin/ruff format $(LINTED)
	$(VENV)/bin/ruff check --fix $(LINTED)

test: $(STAMP) lint bytecode
	$(PY) -m pytest -n 2 tests

# The suite with jitted programs run by the interpreter backend (tests of the native backend's
# own workings, marked `native`, still run natively: tests/conftest.py).
test-interpret: $(STAMP) bytecode
	KILN_BACKEND=interpret $(PY) -m pytest -n 2 tests

# The differential fuzz tests of `make test`, with many more random programs each.
FUZZ_EXAMPLES ?= 1000
fuzz: $(STAMP)
	KILN_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(PY) -m pytest -n 2 tests/test_fuzz_programs.py

bench: $(STAMP) bytecode
	$(PY) benchmarks/run_all.py

clean:
	rm -rf $(VENV) build *.egg-info kiln/_prebuilt
