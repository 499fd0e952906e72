"""One interface for every autoscaling policy the benchmark compares, Daedalus included.

Once per loop a policy takes one step against a job's ports (models.ports.Target): it observes, decides and,
when it wants another scale-out, scales. The baselines only name the scale-out they want from what the monitor
phase sees (`Baseline.decide`); the Daedalus policy runs the whole MAPE-K loop body over its knowledge.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

from daedalus.models.ports import Target
from daedalus.models.types import Observation, kind_of


@dataclass(frozen=True)
class Step:
    """What one policy step did, for the benchmark's figures."""

    kind: str  # hold | no-change | scale-out | scale-in
    current: int
    target: int
    loop_ms: float  # the policy's own decision cost
    executed: bool  # a rescale was applied
    capacity: float | None = None  # estimated capacity at the current scale-out, if the policy estimates one
    forecast_wape: float | None = None  # WAPE of the previous forecast, if the policy forecasts
    retrained: bool = False  # a forecaster was retrained after the step (background work, not in loop_ms)
    reasons: tuple[str, ...] = ()  # why, if the policy says (the Daedalus loop: its decision's reasons)
    forecast_peak: float | None = None  # the forecast's peak over its horizon, if the policy forecasts
    capacity_target: float | None = None  # estimated capacity at the target scale-out, if the policy estimates one


class Policy(Protocol):
    name: str

    def step(self, target: Target) -> Step:
        """One loop: observe, decide and act through the target's ports."""
        ...


class Baseline:
    """A policy that names the scale-out it wants from the last loop's observation; the step applies it."""

    name: str = "baseline"

    @staticmethod
    def check_limits(policy: str, target_utilization: float, min_scaleout: int, max_scaleout: int) -> None:
        """The settings every utilisation-targeting baseline shares, refused with the policy's name."""
        if not 0 < target_utilization <= 1:
            raise ValueError(f"{policy} target_utilization must be in (0, 1], got {target_utilization}")
        if not 1 <= min_scaleout <= max_scaleout:
            raise ValueError(f"{policy} needs 1 ≤ min_scaleout ≤ max_scaleout, got {min_scaleout}, {max_scaleout}")

    def decide(self, obs: Observation, current: int, now: float) -> int:
        """The wanted scale-out (return `current` to keep it)."""
        raise NotImplementedError

    def step(self, target: Target) -> Step:
        cfg, job = target.config, target.job
        now = target.clock.now()
        current = target.scaler.current(job)
        obs = target.metrics.observe(job, now - cfg.loop_interval_s, now)
        started = time.perf_counter()
        wanted = self.decide(obs, current, now)
        loop_ms = 1000 * (time.perf_counter() - started)
        wanted = min(max(wanted, cfg.min_scaleout), cfg.max_scaleout)
        if wanted == current:
            return Step("no-change", current, current, loop_ms, executed=False)
        target.scaler.scale(job, wanted, f"{self.name}-{int(now)}")
        return Step(kind_of(current, wanted), current, wanted, loop_ms, executed=True)


class Static(Baseline):
    """The paper's baseline: the maximum scale-out, always."""

    def __init__(self, max_scaleout: int) -> None:
        self.name = "static"
        self.max_scaleout = max_scaleout

    def decide(self, obs: Observation, current: int, now: float) -> int:
        return self.max_scaleout
