"""The Daedalus policy: the whole MAPE-K loop body (models.loop.iteration.iterate) over the policy's own knowledge.

Background work of a deployment — the WAPE-triggered retraining and the periodic fleet retraining every
`retrain_every_s` — is emulated after each step, outside the step's measured cost.
"""

from __future__ import annotations

import math
from dataclasses import replace

from daedalus.models.config import LoopConfig
from daedalus.models.knowledge import Knowledge
from daedalus.models.loop.iteration import PLAIN, Iteration, iterate
from daedalus.models.policies.base import Step
from daedalus.models.ports import Target


class Daedalus:
    """The loop with the planner `config.planner` (`name`: how the benchmark calls it)."""

    def __init__(self, config: LoopConfig, job: str = "sim", retrain_every_s: float | None = 3600.0,
                 name: str = "daedalus") -> None:
        self.name = name
        self.config = config
        self.knowledge = Knowledge.new(job, config)
        self.retrain_every_s = retrain_every_s
        self.last: Iteration | None = None
        self._steps = 0

    def step(self, target: Target) -> Step:
        if target.config.planner != self.config.planner:  # the policy's planner decides, whatever the target says
            target = replace(target, config=replace(target.config, planner=self.config.planner))
        it = iterate(target, self.knowledge, PLAIN)
        self.last = it
        self._steps += 1
        d, a = it.decision, it.analysis
        return Step(d.kind, d.current, d.target, it.loop_ms,
                    executed=it.action is not None and it.action.state == "executed",
                    capacity=a.capacity(a.scaleout), forecast_wape=a.forecast.previous_wape,
                    retrained=self._retrain(target.clock.now()), reasons=d.reasons, forecast_peak=a.forecast.peak,
                    capacity_target=a.capacity(d.target) if 1 <= d.target <= len(a.capacities) else None)

    def _retrain(self, now: float) -> bool:
        f = self.knowledge.forecaster
        elapsed = self._steps * self.config.loop_interval_s
        periodic = self.retrain_every_s is not None and f.fitted and math.isclose(elapsed % self.retrain_every_s, 0)
        if not (f.retrain_needed or periodic):
            return False
        try:
            f.retrain(now)
        except ValueError:  # too little data in the window: the loop keeps its model
            return False
        return True
