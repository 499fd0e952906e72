"""Per-job control-loop settings, each declared once with its unit and default.

The jobs file's loop settings are derived from these declarations (`connectors/jobs.py`): a field marked
`in_jobs_file(kind)` is a key of a jobs-file entry, under the same name, with the same default; `kind` says how the
file writes it. Models only ever see these frozen values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

Mode = Literal["auto", "approve", "dry-run"]
Planner = Literal["daedalus", "daedalus-paper"]
PLANNERS: tuple[str, ...] = ("daedalus", "daedalus-paper")
PAPER_SCALE_IN_S = 1200.0  # the scale-in interval of each planner when the job sets none (`LoopConfig.scale_in_s`)
MPC_SCALE_IN_S = 600.0
# The rolling window the rescale budget (`LoopConfig.max_rescales_per_hour`) is counted over. Two hours, not six:
# at 3 an hour it allows 6 per window, so at most 18 in any 6 hours (what the oracle is held to) and never 18 spent
# in the first hour of six; one hour would leave a budget of 3, too few to follow a peak up and back down.
RESCALE_WINDOW_S = 2 * 3600.0


JOBS_FILE = "jobs_file"  # the field metadata that makes a setting a jobs-file key; its value is the kind:
# seconds or "10m"; a whole number; a name; a positive number
JobsFileKind = Literal["duration", "duration ≥ 0", "count ≥ 1", "choice", "number > 0"]


def in_jobs_file(default: Any, kind: JobsFileKind) -> Any:
    """A LoopConfig default that a jobs-file entry may set, under the field's own name."""
    return field(default=default, metadata={JOBS_FILE: kind})


@dataclass(frozen=True)
class LoopConfig:
    """Settings of one job's MAPE-K loop (Algorithm 1 and its guardrails)."""

    min_scaleout: int = 1
    max_scaleout: int = 12
    max_step: int | None = None  # largest change of scale-out in one action; None = unlimited
    # Round targets up to a divisor of the partitions (as Flink does).
    partitions: int | None = in_jobs_file(None, "count ≥ 1")
    target_recovery_time: float = in_jobs_file(600.0, "duration")  # recovery-time target (paper: 600 s)
    recent_rescale_s: float = 600.0  # Algorithm 1 line 1: "within 600 s of the last rescale"
    # No new action within 180 s of the previous one; the model-predictive planner's one exception is a scale-out
    # after an executed rescale when keeping the scale-out would break `latency_slo` itself (models/planning/mpc.py).
    grace_s: float = 180.0
    # How sure that breach must be: the predicted latency of keeping it is judged from the expected one (0: the
    # mean forecast, the expected capacities, half a checkpoint of replay) to the robust one (1: the upper band, the
    # capacities less the margin, a whole checkpoint), as the planner's feasibility is. Just after a rescale the
    # band is at its widest (the burst that caused it is in the recent error) and the new scale-out's capacity is
    # not observed yet, and a second rescale's downtime falls on the backlog the first is draining. Chosen by
    # `bench cv` pooled over three seeds (0, 0.5, 1: docs/benchmark-results.md, "How sure a breach inside the grace
    # period must be").
    grace_breach_band: float = 0.5
    # Scale-ins only save money, so they may wait: no scale-in within this long of the last rescale (Kubernetes
    # HPA and the Flink autoscaler stabilise scale-downs the same way). 0 turns it off. None: the planner's own
    # (`scale_in_s`): 600 s for the model-predictive planner, whose schedules refuse a scale-in the forecast would
    # undo, 1,200 s for the paper's greedy one.
    scale_in_interval: float | None = in_jobs_file(None, "duration ≥ 0")
    loop_interval_s: float = 60.0  # one iteration per minute
    checkpoint_interval: float = in_jobs_file(10.0, "duration")
    warmup_s: float = 60.0  # samples this soon after a restart are not steady state
    downtime_out_s: float = 30.0  # initial downtime estimates, learned from observed recoveries
    downtime_in_s: float = 15.0
    max_recovery_s: float = 3600.0  # recovery predictions are searched up to this long
    stale_after_s: float = 180.0  # newest sample older than this → hold
    forecast_max_d: int = 2  # auto-ARIMA's largest order of differencing
    mode: Mode = in_jobs_file("auto", "choice")
    approval_timeout: float = in_jobs_file(600.0, "duration")  # an unanswered approval expires after this
    # After an operator's manual scale the loop keeps that scale-out this long (wall-clock), in every mode: it
    # plans and reports but takes no action of its own, then plans again from where the operator left the job.
    # An approval needs no hold: it is the loop's own plan. 0: the next run may change it again.
    manual_hold: float = in_jobs_file(1800.0, "duration ≥ 0")
    # Which planner decides inside the guardrails: "daedalus" plans over the forecast horizon (model-predictive,
    # models/planning/mpc.py), the default: on the benchmark (docs/benchmark-results.md) it keeps the 60 s latency SLO
    # on 19 of 21 workloads where the paper's planner keeps it on 12. "daedalus-paper" is the paper's Algorithm 1,
    # greedy minute by minute, kept so the difference stays measurable.
    planner: Planner = in_jobs_file("daedalus", "choice")
    # The job's latency objective, seconds end to end. The planner never picks a schedule whose predicted latency
    # (downtime, replay and catch-up included) exceeds `latency_budget_share` × this, so forecast and capacity
    # errors have the rest; how fast a backlog must drain follows from it.
    latency_slo: float = in_jobs_file(60.0, "duration")
    latency_budget_share: float = 0.8
    # Worker-seconds one second of added end-to-end latency is worth, for every second of arrivals it delays:
    # the price the planner puts on a rescale's downtime and catch-up against the workers it saves.
    latency_weight: float = 0.25
    # Plan on the forecast's upper band: forecast × (1 + forecast_z × the recent relative error at that lead).
    forecast_z: float = 1.0
    # Capacity the planner leaves unused: a scale-out runs at most (1 − this) of its estimated capacity.
    capacity_margin: float = 0.02
    # A scale-out is sized to last this long on the forecast's upper band before another one may follow: the
    # planner's pace of rescales (one per 20 minutes at most where the forecast allows it).
    rescale_interval: float = 1200.0
    # Worker-seconds a rescale costs the model-predictive planner besides its downtime and catch-up: a job affords
    # few rescales (at most 18 in 6 hours), so a switch must save more than this to be taken.
    rescale_price: float = 600.0
    # The rescale budget: at most this many rescales per hour, counted over a rolling `RESCALE_WINDOW_S` (3: 6 in
    # any 2 hours, 18 in 6). The model-predictive planner prices each rescale higher as the window's budget runs
    # out, scales in only while a scale-in and the scale-out that may undo it fit, and goes beyond it only when
    # keeping the scale-out would break the latency SLO itself (`budget_exceeded` in the decision's reasons).
    max_rescales_per_hour: float = in_jobs_file(3.0, "number > 0")
    # When the load moves faster than the loop can follow (bursts, minute-to-minute flapping: minute means more
    # than 15 % above their trend within the last `envelope_s` seconds), plan for the largest of those minutes over
    # the next rescale interval instead of chasing each minute (in place of the forecast's band while the load
    # flaps, beside it for bursts; models/planning/mpc.py). 0 turns it off; at most the 30 minutes the analysis
    # hands over (models/loop/analyze.py). Chosen by `bench cv` (every held-out family's fold chose 1,800 over 0
    # and 900: docs/benchmark-results.md, issue 38).
    envelope_s: float = 1800.0
    # Against what a burst is measured (models/planning/mpc.py `level`): 0, the least-squares line through the
    # envelope's minutes; n ≥ 3, the median of the n minutes around each, which a fall to a flat stretch does not
    # cut beneath (a line through it makes the level the load left look like a burst, and the planner holds it).
    # `bench cv` kept the line: the median (5) saves 3–4 points of static but broke the SLO and the budget more
    # often pooled over three seeds (docs/benchmark-results.md, "The level and the ramp"), as did a burst that must
    # be risen into ("The envelope's old level a third time").
    level_minutes: int = 0
    # The capacity estimate's spread (observed scale-outs against their interpolation from the others) is added to
    # the margin of every extrapolated scale-out, up to this much. 0 turns it off, which `bench cv` chose: with the
    # envelope on, 0.1 bought no second within the SLO on any family and cost worker-seconds on most.
    capacity_spread_max: float = 0.0

    @property
    def rescale_budget(self) -> int:
        """Rescales allowed in any `RESCALE_WINDOW_S` (at least one)."""
        return max(1, math.floor(self.max_rescales_per_hour * RESCALE_WINDOW_S / 3600 + 1e-9))

    @property
    def scale_in_s(self) -> float:
        """The scale-in interval in force: the one set, else the planner's own."""
        if self.scale_in_interval is not None:
            return self.scale_in_interval
        return PAPER_SCALE_IN_S if self.planner == "daedalus-paper" else MPC_SCALE_IN_S
    # Rescale verification (models/capacity/verification.py). An executed rescale is judged once the job has recovered,
    # or this long after it at the latest: the capacity it shows at the new scale-out against the prediction.
    verify_after_s: float = 300.0
    # Capacities within this fraction count as the same: an observed capacity at most (1 + this) × the one before
    # bought nothing, one at least (1 − this) × the prediction is what was predicted.
    verify_tolerance: float = 0.10
    # After an ineffective scale-out is rolled back, no scale-out above the rollback's target for this long (cleared
    # early when the bottleneck stage is seen to have room).
    ceiling: float = in_jobs_file(3600.0, "duration")

    def __post_init__(self) -> None:
        if self.min_scaleout < 1:
            raise ValueError(f"min_scaleout must be ≥ 1, got {self.min_scaleout}")
        if self.max_scaleout < self.min_scaleout:
            raise ValueError(
                f"max_scaleout ({self.max_scaleout}) must be ≥ min_scaleout ({self.min_scaleout})"
            )
        if self.max_step is not None and self.max_step < 1:
            raise ValueError(f"max_step must be ≥ 1 or None, got {self.max_step}")
        if self.target_recovery_time <= 0 or self.loop_interval_s <= 0:
            raise ValueError("target_recovery_time and loop_interval_s must be positive")
        if self.planner not in PLANNERS:
            raise ValueError(f"planner must be one of {', '.join(PLANNERS)}, got {self.planner!r}")
        if not self.latency_slo > 0:
            raise ValueError(f"latency_slo must be positive, got {self.latency_slo!r}")
        if not 0 < self.latency_budget_share <= 1:
            raise ValueError(f"latency_budget_share must be in (0, 1], got {self.latency_budget_share!r}")
        if self.latency_weight < 0 or self.forecast_z < 0 or self.rescale_price < 0:
            raise ValueError("latency_weight, forecast_z and rescale_price must be ≥ 0")
        if not (math.isfinite(self.max_rescales_per_hour) and self.max_rescales_per_hour > 0):
            raise ValueError(f"max_rescales_per_hour must be a positive number, got {self.max_rescales_per_hour!r}")
        if not 0 <= self.capacity_spread_max < 0.5:
            raise ValueError(f"capacity_spread_max must be in [0, 0.5), got {self.capacity_spread_max!r}")
        if not 0 <= self.grace_breach_band <= 1:
            raise ValueError(f"grace_breach_band must be in [0, 1], got {self.grace_breach_band!r}")
        if not self.envelope_s >= 0:
            raise ValueError(f"envelope_s must be ≥ 0, got {self.envelope_s!r}")
        if self.level_minutes != 0 and not (self.level_minutes >= 3 and self.level_minutes % 2 == 1):
            raise ValueError(f"level_minutes must be 0 (a line) or an odd number ≥ 3, got {self.level_minutes!r}")
        if self.scale_in_interval is not None and not self.scale_in_interval >= 0:
            raise ValueError(f"scale_in_interval must be ≥ 0 or None, got {self.scale_in_interval!r}")
        if not 0 <= self.capacity_margin < 0.5:
            raise ValueError(f"capacity_margin must be in [0, 0.5), got {self.capacity_margin!r}")
