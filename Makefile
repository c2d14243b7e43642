# The two entry points: `make demo` (the main job) and `make test` (the suite).
# Both create .venv with the pinned dependencies when it is missing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.kiln-installed

.PHONY: demo test fuzz bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) examples/tour.py

test: $(STAMP)
	$(PY) -m pytest -n 2 tests

# The differential fuzz tests of `make test`, with many more random programs each.
FUZZ_EXAMPLES ?= 1000
fuzz: $(STAMP)
	KILN_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(PY) -m pytest -n 2 tests/test_fuzz_programs.py

bench: $(STAMP)
	$(PY) benchmarks/run_all.py

clean:
	rm -rf $(VENV) build *.egg-info
