"""Time is a parameter: models take `now`; flows get it from a clock."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Epoch seconds."""
        ...


class WallClock:
    """Production clock."""

    def now(self) -> float:
        return time.time()


class VirtualClock:
    """Simulation clock: moves only when told, so six hours run in seconds."""

    def __init__(self, start: float = 1_767_225_600.0) -> None:  # 2026-01-01T00:00:00Z
        self._now = float(start)

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"a clock does not go backwards ({seconds} s)")
        self._now += seconds
