"""Per-job control-loop settings, each declared once with its unit and default.

The jobs file (deployments/) maps onto these; models only ever see these frozen values.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Mode = Literal["auto", "approve", "dry-run"]


@dataclass(frozen=True)
class LoopConfig:
    """Settings of one job's MAPE-K loop (Algorithm 1 and its guardrails)."""

    min_scaleout: int = 1
    max_scaleout: int = 12
    max_step: int | None = None  # largest change of scale-out in one action; None = unlimited
    partitions: int | None = None  # round targets up to a divisor of the partitions (as Flink does)
    target_recovery_time: float = 600.0  # recovery-time target (paper: 600 s)
    recent_rescale_s: float = 600.0  # Algorithm 1 line 1: "within 600 s of the last rescale"
    grace_s: float = 180.0  # no new action within 180 s of the previous one
    # Scale-ins only save money, so they may wait: no scale-in within this long of the last rescale (Kubernetes
    # HPA and the Flink autoscaler stabilise scale-downs the same way). 0 turns it off.
    scale_in_interval: float = 1200.0
    loop_interval_s: float = 60.0  # one iteration per minute
    checkpoint_interval: float = 10.0
    warmup_s: float = 60.0  # samples this soon after a restart are not steady state
    downtime_out_s: float = 30.0  # initial downtime estimates, learned from observed recoveries
    downtime_in_s: float = 15.0
    max_recovery_s: float = 3600.0  # recovery predictions are searched up to this long
    stale_after_s: float = 180.0  # newest sample older than this → hold
    forecast_max_d: int = 2  # auto-ARIMA's largest order of differencing
    mode: Mode = "auto"
    approval_timeout: float = 600.0  # an unanswered approval expires after this

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
