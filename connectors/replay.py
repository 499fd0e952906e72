"""The simulated engine as a backtest's replay: the tasks and flows reach the simulator through here, as they reach
every engine through connectors/. One job's rows in, its backtest report out (sim/backtest.py); `replay_group` is
the same for a Spark executor (pandas in, pandas out), and `pareto_png` draws the report for an artifact."""

from __future__ import annotations

import json
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import pandas as pd

from daedalus.models.errors import DaedalusError
from daedalus.sim.backtest import ACTUAL, InsufficientHistory, backtest, check_policies, default_policies
from daedalus.sim.backtest import history_from_rows as history_from_rows

__all__ = ["ACTUAL", "RESULT_SCHEMA", "InsufficientHistory", "check_policies", "default_policies", "pareto_png",
           "replay", "replay_group"]

# what `replay_group` returns, as Spark declares it
RESULT_SCHEMA = "job string, report string, error string, cpu_s string"
HISTORY_PHASE = "history"  # the CPU time before the first policy: the history rebuilt, checked, capacity fitted


def replay(job: str, rows: pd.DataFrame, names: Sequence[str], max_scaleout: int | None = None,
           downtimes: tuple[float, float] | None = None, seed: int = 0,
           on_policy: Callable[[str], None] | None = None) -> dict[str, Any]:
    """One job's lake rows replayed under each policy, beside what actually ran."""
    return backtest(history_from_rows(job, rows), names, max_scaleout, downtimes, seed, on_policy)


class PhaseClock:
    """CPU seconds of this process per phase, each phase ending when the next begins (`on_policy` hears them)."""

    def __init__(self, first: str) -> None:
        self.seconds: dict[str, float] = {}
        self._phase, self._since = first, time.process_time()

    def __call__(self, phase: str) -> None:
        now = time.process_time()
        self.seconds[self._phase] = self.seconds.get(self._phase, 0.0) + now - self._since
        self._phase, self._since = phase, now


def replay_group(rows: pd.DataFrame, names: tuple[str, ...], seed: int) -> pd.DataFrame:
    """One job's rows in, its report (JSON) or why it was refused out, and the CPU seconds of each phase: runs
    inside a Spark executor."""
    job = str(rows["job"].iloc[0])
    clock = PhaseClock(HISTORY_PHASE)
    try:
        report, error = json.dumps(replay(job, rows, names, seed=seed, on_policy=clock)), None
    except DaedalusError as exc:
        report, error = None, str(exc)
    except Exception as exc:  # a job the replay cannot run must not fail the fleet's other jobs
        report, error = None, f"{type(exc).__name__}: {exc} ({traceback.format_exc(limit=1).splitlines()[-1]})"
    clock("")
    return pd.DataFrame({"job": [job], "report": [report], "error": [error], "cpu_s": [json.dumps(clock.seconds)]})


def pareto_png(report: dict[str, Any]) -> bytes:
    """Worker-hours against p95 latency, one point per policy and one for what ran, as PNG bytes."""
    from daedalus.sim.backtest_plot import backtest_png

    return backtest_png(report)
