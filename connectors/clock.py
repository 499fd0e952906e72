"""The production clock: the wall clock, behind the models' Clock protocol."""

from __future__ import annotations

import time


class WallClock:
    """Epoch seconds from the operating system."""

    def now(self) -> float:
        return time.time()


WALL = WallClock()
