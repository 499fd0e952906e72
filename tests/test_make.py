"""`make test`, the README's test command and all that `.ci/run` runs, runs the whole suite and fails when it fails.

A Makefile edit once left `$(PYTEST)` undefined: the recipe then read ` -m engine; …`, make took the leading `-`
for "ignore errors" and dropped it, and `make test` passed having run no test at all.
"""

from __future__ import annotations

import ast
import shlex
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_make_test_runs_the_engine_tests_with_the_timeless_beside_them_then_all_the_others_and_fails_on_any():
    # What `make test` would run, printed by `make -n` (nothing is run).
    recipe = subprocess.run(["make", "-n", "test"], cwd=ROOT, capture_output=True, text=True, timeout=60,
                            check=True).stdout
    steps = [shlex.split(step) for step in recipe.replace("\\\n", " ").split(";") if "pytest" in step]
    assert [words[words.index("pytest") - 1] for words in steps] == ["-m", "-m", "-m"], recipe  # python -m pytest
    markers = [words[words.index("-m", words.index("pytest")) + 1] for words in steps]
    # Together, every test exactly once; the timeless run in the background (`&`) at the lowest priority.
    assert markers == ["timeless and not engine", "engine", "not engine and not timeless"], recipe
    assert steps[0][:3] == ["nice", "-n", "19"] and "&" in steps[0], recipe
    assert "test $engines -eq 0 && test $timeless -eq 0 && test $rest -eq 0" in recipe, recipe


# What a timeless module may not use: a clock, a server, a subprocess, a thread or socket, or a fixture that starts one.
WAITS = {"time", "subprocess", "socket", "threading", "http", "urllib", "requests", "httpx", "asyncio", "signal",
         "multiprocessing", "concurrent", "prefect", "pyspark", "pyflink", "kubernetes"}
STARTS = {"prefect_harness", "spark", "free_port", "local_prometheus", "start_server", "start_postgres", "LocalFlink",
          "fake_api", "fake_kube", "kube"}


def _waits(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    found = []
    for node in ast.walk(tree):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                 [node.module or "", *(a.name for a in node.names)] if isinstance(node, ast.ImportFrom) else [])
        found += [n for n in names if n.split(".")[0] in WAITS or n in STARTS]
        if isinstance(node, ast.FunctionDef):
            found += [a.arg for a in node.args.args if a.arg in STARTS]
        if isinstance(node, ast.Name) and node.id in STARTS:
            found.append(node.id)
    return found


def test_a_timeless_module_uses_no_clock_server_subprocess_or_thread():
    from tests.conftest import TIMELESS

    assert {m: w for m in TIMELESS if (w := _waits(ROOT / m))} == {}
    # The check finds what it looks for: modules that wait on servers and clocks are not timeless.
    assert {w.split(".")[0] for w in _waits(ROOT / "tests/test_flow.py")} >= {"time", "prefect", "prefect_harness"}
    assert "subprocess" in _waits(ROOT / "tests/test_make.py")
    assert "local_prometheus" in _waits(ROOT / "tests/connectors/test_connectors_prometheus_e2e.py")


def test_the_modules_handed_out_first_exist():
    from tests.conftest import ENGINE_TESTS, LONGEST, TIMELESS

    assert [m for m in (*LONGEST, *ENGINE_TESTS, *TIMELESS) if not (ROOT / m).exists()] == []
    assert not set(TIMELESS) & {*LONGEST, *ENGINE_TESTS}
