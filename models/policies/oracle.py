"""`oracle`: the offline optimum (models.planning.oracle) as a policy, so its schedule runs in the same simulator
as every other policy and its latency and seconds over the SLO are measured like theirs.

At its first step it reads the whole run from the target (which must know it in advance: the simulated job), solves
the upper-bound model with a latency margin of 0 s, replays the schedule in a copy of the simulator, and tightens
the margin until the replay keeps the SLO (or no margin does; then the schedule with the fewest seconds over). It
also solves the relaxation, whose worker-seconds no schedule keeping the SLO can beat (`lower`).
"""

from __future__ import annotations

import time

from daedalus.models.errors import ConfigurationError
from daedalus.models.planning.oracle import Foresight, Plan, rescale_limit, solve
from daedalus.models.policies.base import Step
from daedalus.models.ports import Target
from daedalus.models.types import kind_of

MARGINS_S = (0.0, 3.0, 6.0, 10.0, 20.0, 40.0)  # latency margins tried in turn, seconds under the SLO


class Oracle:
    """Follows the offline optimum's schedule, one scale-out per loop interval."""

    name = "oracle"

    def __init__(self, margins_s: tuple[float, ...] = MARGINS_S) -> None:
        self.margins_s = margins_s
        self.plan: Plan | None = None
        self.margin_s: float | None = None
        self.replayed_over_s: int | None = None
        self.lower: Plan | None = None  # the relaxation's optimum; None when even it cannot keep the SLO
        self._steps = 0

    def solve(self, target: Target) -> Plan:
        metrics = target.metrics
        if not isinstance(metrics, Foresight):
            raise ConfigurationError("the oracle needs a target that knows the whole run in advance: the simulator")
        loop, slo = int(target.config.loop_interval_s), float(target.config.latency_slo)
        duration = len(metrics.oracle_instance(loop, 0, slo).workload)
        inst = metrics.oracle_instance(loop, rescale_limit(duration), slo)
        try:
            self.lower = solve(inst, relaxed=True)
        except ValueError:
            self.lower = None
        best: tuple[int, Plan, float] | None = None
        for margin in self.margins_s:
            plan = solve(inst, margin)
            over = metrics.seconds_over_slo(plan.scaleouts, loop, slo)
            if best is None or (over, plan.worker_seconds) < (best[0], best[1].worker_seconds):
                best = (over, plan, margin)
            if over == 0 or plan.seconds_over_slo > 0:
                break  # kept, or the model itself cannot keep the SLO: a larger margin will not help
        assert best is not None
        self.replayed_over_s, plan, self.margin_s = best
        return plan

    def step(self, target: Target) -> Step:
        started = time.perf_counter()
        if self.plan is None:
            self.plan = self.solve(target)
        current = target.scaler.current(target.job)
        self._steps += 1
        wanted = self.plan.scaleouts[self._steps] if self._steps < len(self.plan.scaleouts) else current
        loop_ms = 1000 * (time.perf_counter() - started)
        if wanted == current:
            return Step("no-change", current, current, loop_ms, executed=False)
        target.scaler.scale(target.job, wanted, f"oracle-{int(target.clock.now())}")
        return Step(kind_of(current, wanted), current, wanted, loop_ms, executed=True)
