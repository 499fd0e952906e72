"""The embedded simulator as a metrics source, a scaler and a clock: the default target."""

from __future__ import annotations

from collections.abc import Sequence

from daedalus.models.planning.oracle import Instance
from daedalus.models.types import Observation
from daedalus.sim import foresight
from daedalus.sim.simulator import Simulator


class SimulatedJob:
    """Adapts a Simulator to the MetricsSource, Scaler and Clock protocols."""

    def __init__(self, sim: Simulator) -> None:
        self.sim = sim

    def now(self) -> float:
        return self.sim.now

    def observe(self, job: str, since: float | None, until: float) -> Observation:
        start = until - 600.0 if since is None else since
        return self.sim.observe(start, until)

    def current(self, job: str) -> int:
        return self.sim.scaleout

    def scale(self, job: str, target: int, decision_id: str, dry_run: bool = False) -> str:
        if dry_run:
            return f"dry run: would scale {job} {self.sim.scaleout} → {target}"
        before = self.sim.scaleout
        self.sim.scale(target)
        return f"scaled {job} {before} → {target} (decision {decision_id})"

    def oracle_instance(self, loop_s: int, max_rescales: int, slo_s: float) -> Instance:
        """The whole run in advance, for the offline optimum (models.planning.oracle.Foresight)."""
        return foresight.instance(self.sim, loop_s, max_rescales, slo_s)

    def seconds_over_slo(self, scaleouts: Sequence[int], loop_s: int, slo_s: float) -> int:
        return foresight.seconds_over_slo(self.sim, scaleouts, loop_s, slo_s)
