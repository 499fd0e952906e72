"""What a control loop talks to, behind narrow protocols: a metrics source, a scaler and a clock.

Time is a parameter: models take `now`; flows get it from a clock (connectors.clock in production, the simulated
job's own clock in simulation), so six simulated hours run in seconds through the same code.

Prometheus, Kubernetes, Flink REST and the embedded simulator implement the same protocols, so the loop body
(models/loop/) never knows which one it drives.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from daedalus.models.config import LoopConfig
from daedalus.models.types import Observation


class Clock(Protocol):
    def now(self) -> float:
        """Epoch seconds."""
        ...


class MetricsSource(Protocol):
    def observe(self, job: str, since: float | None, until: float) -> Observation:
        """Samples with since < timestamp ≤ until (the whole recent window when since is None)."""
        ...


class Scaler(Protocol):
    def current(self, job: str) -> int:
        """The job's current scale-out as the platform reports it."""
        ...

    def scale(self, job: str, target: int, decision_id: str, dry_run: bool = False) -> str:
        """Apply (or validate, with dry_run) a new scale-out; returns a message for the ledger.

        Raises ConnectorError when the platform refuses.
        """
        ...


@dataclass
class Target:
    """Everything one iteration of the loop needs to reach one streaming job."""

    job: str
    metrics: MetricsSource
    scaler: Scaler
    clock: Clock  # the job's clock: a simulated job's runs faster than the wall
    config: LoopConfig = field(default_factory=LoopConfig)
    wall: Clock | None = None  # what operators live by (approval timeouts); None: the job's clock is the wall

    def wall_now(self) -> float:
        return (self.wall or self.clock).now()
