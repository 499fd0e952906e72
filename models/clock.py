"""Time is a parameter: models take `now`; flows get it from a clock (connectors.clock in production, the
simulated job's own clock in simulation), so six simulated hours run in seconds through the same code."""

from __future__ import annotations

from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Epoch seconds."""
        ...
