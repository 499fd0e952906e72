"""One interface for every autoscaling policy the benchmark compares.

A policy sees what the monitor phase sees, once per loop, and names the scale-out it wants. The Daedalus
policy is the full MAPE-K loop (flows.mape_k.iterate); the baselines are small classes here.
"""

from __future__ import annotations

from typing import Protocol

from models.types import Observation


class Policy(Protocol):
    name: str

    def decide(self, obs: Observation, current: int, now: float) -> int:
        """The wanted scale-out (return `current` to keep it)."""
        ...


class Static:
    """The paper's baseline: the maximum scale-out, always."""

    def __init__(self, max_scaleout: int) -> None:
        self.name = "static"
        self.max_scaleout = max_scaleout

    def decide(self, obs: Observation, current: int, now: float) -> int:
        return self.max_scaleout
