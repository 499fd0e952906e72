"""`make test`, the README's test command and all that `.ci/run` runs, runs the whole suite and fails when it fails.

A Makefile edit once left `$(PYTEST)` undefined: the recipe then read ` -m engine; …`, make took the leading `-`
for "ignore errors" and dropped it, and `make test` passed having run no test at all.
"""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_make_test_runs_the_engine_tests_then_all_the_others_and_fails_on_either():
    # What `make test` would run, printed by `make -n` (nothing is run).
    recipe = subprocess.run(["make", "-n", "test"], cwd=ROOT, capture_output=True, text=True, timeout=60,
                            check=True).stdout
    steps = [shlex.split(step) for step in recipe.replace("\\\n", " ").split(";") if "pytest" in step]
    assert [words[words.index("pytest") - 1] for words in steps] == ["-m", "-m"], recipe  # python -m pytest
    markers = [words[words.index("-m", words.index("pytest")) + 1] for words in steps]
    assert markers == ["engine", "not engine"], recipe  # together, every test exactly once
    assert "test $engines -eq 0 && test $rest -eq 0" in recipe, recipe


def test_the_modules_handed_out_first_exist():
    from tests.conftest import ENGINE_TESTS, LONGEST

    assert [m for m in (*LONGEST, *ENGINE_TESTS) if not (ROOT / m).exists()] == []
