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

# Two steps: first the tests that read a real engine's capacity, alone in one process (capacity reads low while another
# test loads the other core), then everything else on four xdist workers, a module to a worker (a module's servers
# start once; the longest units wait on schedules, faults and expiries, and on three workers the cores were 30-80 %
# idle while they waited: 590 s, against 450-520 s on four). Both always run; either failing fails the target.
# Bytecode is written even where the shell says not to (PYTHONDONTWRITEBYTECODE): every test process and subprocess
# would otherwise compile the project again, and pytest rewrite every test module's asserts (a worker's collection
# 9.8 → 5.0 CPU-s).
PYTEST := PYTHONDONTWRITEBYTECODE= PREFECT_SERVER_ANALYTICS_ENABLED=false OPENBLAS_NUM_THREADS=1 $(BIN)/python -m pytest -q -p no:cacheprovider -rs --durations=15
test: install-test
	$(BIN)/ruff check .
	$(PYTEST) -m engine; engines=$$?; $(PYTEST) -n 4 --dist loadscope --no-loadscope-reorder -m "not engine"; rest=$$?; \
	test $$engines -eq 0 && test $$rest -eq 0

lint: install-test
	$(BIN)/ruff check .
