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

# One process: the engines' end-to-end tests measure capacity, which reads low while another test loads the other
# core (`-n 2 --dist loadgroup` runs the suite on two workers; docs/start.md says what it costs).
test: install-test
	$(BIN)/ruff check .
	PREFECT_SERVER_ANALYTICS_ENABLED=false OPENBLAS_NUM_THREADS=1 $(BIN)/python -m pytest -q -p no:cacheprovider -rs

lint: install-test
	$(BIN)/ruff check .
