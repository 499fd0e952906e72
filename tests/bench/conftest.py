"""Fixtures of the bench area: observations built by hand, so the policies can be checked against hand-computed
answers, and small workload files."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest

from daedalus.models.types import Observation


def observation(
    cpu: Sequence[float],
    throughput: Sequence[float] | None = None,
    workload: float = 0.0,
    lag: float = 0.0,
    seconds: int = 60,
    end: float = 1_000.0,
    uptime_start: float = 1_000.0,
    down_s: int = 0,
) -> Observation:
    """`seconds` samples ending at `end`, one constant CPU (and throughput) per worker.

    The first `down_s` seconds are a rescale downtime: uptime 0 and CPU 0, as the simulator reports them.
    """
    t = end - seconds + 1 + np.arange(seconds, dtype=float)
    uptime = uptime_start + np.arange(seconds, dtype=float)
    uptime[:down_s] = 0.0
    if down_s:
        uptime[down_s:] = 1.0 + np.arange(seconds - down_s)
    tp = throughput if throughput is not None else [0.0] * len(cpu)
    cpu_series, tp_series = {}, {}
    for k, (c, y) in enumerate(zip(cpu, tp, strict=True)):
        x = np.full(seconds, float(c))
        x[:down_s] = 0.0
        v = np.full(seconds, float(y))
        v[:down_s] = 0.0
        cpu_series[f"worker-{k}"], tp_series[f"worker-{k}"] = x, v
    return Observation(job="bench", timestamps=t, workload=np.full(seconds, float(workload)), throughput=tp_series,
                       cpu=cpu_series, lag=np.full(seconds, float(lag)), uptime_s=uptime, scaleout=len(cpu))


@pytest.fixture
def obs() -> Callable[..., Observation]:
    return observation


@pytest.fixture
def short_trace(tmp_path: Path) -> Path:
    """A 20-minute per-second trace (second|count): a ramp up and down."""
    t = np.arange(1200)
    values = 20_000 + 60 * np.minimum(t, 1200 - t)
    path = tmp_path / "short_ramp.csv"
    path.write_text("second|count\n" + "".join(f"{s}|{v}\n" for s, v in zip(t, values, strict=True)))
    return path
