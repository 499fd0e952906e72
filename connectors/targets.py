"""What a control loop talks to: a metrics source, a scaler and a clock, behind narrow protocols.

Connectors for Prometheus and Kubernetes implement the same protocols as the embedded simulator, so the
tasks never know which one they drive. Targets are registered per job name; a flow run looks its job up.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from models.clock import Clock
from models.config import LoopConfig
from models.errors import ConfigurationError
from models.types import Observation


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
    """Everything a control-loop run needs to reach one streaming job."""

    job: str
    metrics: MetricsSource
    scaler: Scaler
    clock: Clock
    config: LoopConfig = field(default_factory=LoopConfig)


_REGISTRY: dict[str, Target] = {}


def register(target: Target) -> None:
    _REGISTRY[target.job] = target


def unregister(job: str) -> None:
    _REGISTRY.pop(job, None)


def get(job: str) -> Target:
    try:
        return _REGISTRY[job]
    except KeyError:
        known = ", ".join(sorted(_REGISTRY)) or "none"
        raise ConfigurationError(f"no target registered for job {job!r}; known: {known}") from None
