"""The typed values that flow through one MAPE-K iteration.

monitor → Observation → analyze → Analysis → plan → Decision → execute → ScalingAction.
"Hold, because …" is a Decision like any other, never an exception.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

DecisionKind = Literal["hold", "no-change", "scale-out", "scale-in"]
# "executing": the intent is recorded durably and the target is being changed (write-ahead); the next run
# reconciles an intent its run did not finish: "executed" when the target reached it, else "abandoned".
ActionState = Literal["proposed", "approved", "rejected", "expired", "executing", "executed", "abandoned",
                      "dry-run", "failed", "superseded"]


@dataclass(frozen=True, eq=False)
class Observation:
    """Metrics of one job since the previous loop, aligned on `timestamps`.

    Per-worker arrays have the length of `timestamps`; NaN marks a step where the worker did not
    report (it did not exist yet, or the job was restarting). `uptime_s` is the time since the job
    last (re)started at each step: samples in the warm-up after a restart are not steady state.
    `holds` carries reasons found while collecting (a source unreachable, series missing).
    """

    job: str
    timestamps: np.ndarray  # epoch seconds, increasing, one per step
    workload: np.ndarray  # tuples/s arriving at the source
    throughput: Mapping[str, np.ndarray]  # tuples/s processed, per worker
    cpu: Mapping[str, np.ndarray]  # CPU utilization in [0, 1], per worker
    lag: np.ndarray  # consumer lag in tuples
    uptime_s: np.ndarray  # seconds since the last (re)start
    scaleout: int  # current scale-out
    step_s: float = 1.0
    holds: tuple[str, ...] = ()

    @property
    def end(self) -> float:
        return float(self.timestamps[-1]) if len(self.timestamps) else float("nan")

    @property
    def workers(self) -> tuple[str, ...]:
        return tuple(sorted(self.throughput))


@dataclass(frozen=True)
class Forecast:
    """Workload forecast: one value per second from `start` for the horizon."""

    start: float
    values: tuple[float, ...]
    method: Literal["arima", "linear", "none"]
    previous_wape: float | None  # WAPE of the previous forecast on what actually arrived

    @property
    def peak(self) -> float:
        return max(self.values) if self.values else 0.0


@dataclass(frozen=True)
class Analysis:
    """What the analyze phase concluded, input to the planner."""

    now: float
    scaleout: int  # current
    avg_workload: float  # average workload of the last loop, tuples/s
    lag: float  # current consumer lag, tuples
    capacities: tuple[float, ...]  # capacities[i - 1] = C_i, tuples/s, i = 1 … max
    observed: tuple[bool, ...]  # whether C_i comes from an observed scale-out
    forecast: Forecast
    recovery_times: tuple[float, ...]  # recovery_times[i - 1]: predicted seconds to recover at i
    holds: tuple[str, ...] = ()  # reasons the planner must hold (bad data, quarantine, …)
    # observed_load[i - 1]: the load (CapacityModel.load) C_i was observed at, 0.0 where C_i is estimated; () = unknown
    observed_load: tuple[float, ...] = ()

    def capacity(self, scaleout: int) -> float:
        return self.capacities[scaleout - 1]

    def recovery_time(self, scaleout: int) -> float:
        return self.recovery_times[scaleout - 1]


@dataclass(frozen=True)
class Decision:
    """The planner's answer: a target scale-out with its reasons, or a named hold."""

    id: str
    time: float
    kind: DecisionKind
    current: int
    target: int
    reasons: tuple[str, ...] = ()
    predicted_recovery_s: float | None = None

    def __post_init__(self) -> None:
        if self.current < 1 or self.target < 1:
            raise ValueError(f"a scale-out must be at least 1, got {self.current} → {self.target}")
        if self.kind in ("hold", "no-change") and self.target != self.current:
            raise ValueError(f"a {self.kind} decision keeps the scale-out, got {self.current} → {self.target}")

    @property
    def changes(self) -> bool:
        return self.target != self.current


@dataclass(frozen=True)
class ScalingAction:
    """What execute did (or would do) with a decision; one ledger entry's worth."""

    decision_id: str
    time: float
    current: int
    target: int
    state: ActionState
    message: str = ""


@dataclass
class LedgerEntry:
    """Append-only record of a decision and what became of it."""

    id: str
    time: float
    current: int
    target: int
    kind: DecisionKind
    reasons: tuple[str, ...]
    state: ActionState | Literal["decided"]
    predicted_recovery_s: float | None = None
    observed_recovery_s: float | None = None
    message: str = ""
    history: list[tuple[float, str]] = field(default_factory=list)
    # The wall clock when it was recorded, what people read; `time` is the job's clock (a simulated job's runs
    # faster). None in entries stored before it existed.
    wall: float | None = None

    @property
    def shown_time(self) -> float:
        """When it happened, as an operator's clock says."""
        return self.time if self.wall is None else self.wall
