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


@dataclass(frozen=True)
class StageLoad:
    """One stage (a Flink task, a chain of operators) of the job over the loop's window.

    `busy` is the busiest subtask's share of time spent processing, `backpressured` its subtasks' mean share of time
    waiting on the stage downstream, both in [0, 1]; `records_in` what the stage takes in per second, all subtasks
    together (what a source emits, for a source). A stage that stays busy while the others wait or idle is the job's
    bottleneck (``daedalus.models.capacity.verification``).
    """

    name: str
    parallelism: int  # subtasks now
    busy: float
    backpressured: float
    records_in: float
    source: bool = False

    def __post_init__(self) -> None:
        if self.parallelism < 1:
            raise ValueError(f"stage {self.name}: parallelism must be at least 1, got {self.parallelism}")


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
    # How far back each value reaches: a rate over the last `window_s` seconds (Prometheus' rate windows); 0 for values
    # of their own instant (the simulator's per-second counts). Recovery is over where a whole window is normal.
    window_s: float = 0.0
    holds: tuple[str, ...] = ()
    stages: tuple[StageLoad, ...] = ()  # per stage over the window, where the engine publishes it (Flink, simulator)

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
    # The workload's last minute means, oldest first (the forecaster's record; () = unknown): how fast the load
    # moves, which the planner's envelope needs (models/planning/mpc.py).
    recent_minutes: tuple[float, ...] = ()

    def capacity(self, scaleout: int) -> float:
        return self.capacities[scaleout - 1]

    def recovery_time(self, scaleout: int) -> float:
        return self.recovery_times[scaleout - 1]


def kind_of(current: int, target: int) -> DecisionKind:
    """A change's kind, derived here only: "scale-out" to more workers, "scale-in" to fewer, else "no-change" (a
    hold is named where the loop holds, never derived)."""
    if target == current:
        return "no-change"
    return "scale-out" if target > current else "scale-in"


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
    # Who approved, rejected or scaled by hand (the operator's name as the ledger records it); None: the loop alone.
    operator: str | None = None
    # What became of it, as (wall-clock time, event) — "proposed", "approved by alice", "executed" — so the ledger
    # reads "proposed → approved by alice → executed", each at its own time. `history` keeps the details, on the
    # job's clock. Empty in entries stored before it existed.
    events: list[tuple[float, str]] = field(default_factory=list)
    # Whether an executed rescale bought what was predicted (models/capacity/verification.py): "effective", "partly
    # effective", "ineffective"; None until judged (and in entries stored before verification existed).
    verdict: str | None = None
    capacity_ratio: float | None = None  # observed / predicted capacity at the target, with the verdict
    # An operator's manual scale that the loop keeps (models/loop/messages.py): until when, as promised (wall clock),
    # and when the hold ended (a loop saw its time was up, an approval lifted it or another manual scale replaced it).
    held_until: float | None = None
    hold_ended: float | None = None

    @property
    def shown_time(self) -> float:
        """When it happened, as an operator's clock says."""
        return self.time if self.wall is None else self.wall

    @property
    def changed(self) -> float:
        """When its newest event happened (wall clock): an approved action executes minutes after it was decided."""
        return self.events[-1][0] if self.events else self.shown_time

    def mark(self, state: ActionState, wall: float, by: str | None = None, why: str = "") -> None:
        """Move to `state` at the wall-clock time `wall`, done by the operator `by` (None: by the loop) for the
        reason `why`: the ledger keeps who answered and why, not only that someone did."""
        self.state = state
        if by is not None:
            self.operator = by
        label = state if by is None else f"{state} by {by}"
        self.events.append((wall, f"{label}: {why}" if why else label))
