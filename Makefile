# The two set-up commands of the README: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test install install-test lint

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Installed once per change of pyproject.toml: a second `make demo` starts the demo at once.
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e .
	touch $@

install: $(VENV)/.installed

install-test: $(BIN)/python
	bash scripts/system-deps.sh
	$(BIN)/pip install -q -e '.[test]'
	# A local Flink's scripts and jars (the job is Java); not its Python side, which needs pandas<2.3 (pyproject.toml)
	$(BIN)/pip install -q --no-deps apache-flink==2.3.0 apache-flink-libraries==2.3.0

demo: install
	PREFECT_SERVER_ANALYTICS_ENABLED=false OPENBLAS_NUM_THREADS=1 $(BIN)/daedalus demo

# Two xdist workers: the suite mostly waits on real servers, so two run side by side; the engines' end-to-end tests
# stay on one worker, one after the other (tests/conftest.py, ENGINE_TESTS).
test: install-test
	$(BIN)/ruff check .
	PREFECT_SERVER_ANALYTICS_ENABLED=false OPENBLAS_NUM_THREADS=1 $(BIN)/python -m pytest -q -p no:cacheprovider -n 2 --dist loadgroup -rs

lint: install-test
	$(BIN)/ruff check .
