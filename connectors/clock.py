"""The production clock, the wall clock, behind the models' Clock protocol; and a fixed one, to evaluate the loop
as of a past moment over metrics already in Prometheus (`daedalus step --at`)."""

from __future__ import annotations

import time


class WallClock:
    """Epoch seconds from the operating system."""

    def now(self) -> float:
        return time.time()


WALL = WallClock()


class FixedClock:
    """Always the same moment."""

    def __init__(self, at: float) -> None:
        self.at = float(at)

    def now(self) -> float:
        return self.at
