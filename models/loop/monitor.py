"""Monitor: the job's metrics since the previous loop, and the holds a reading carries (the source down, the scale
target and the metrics disagreeing)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np

from daedalus.models.errors import ConnectorError
from daedalus.models.ports import MetricsSource
from daedalus.models.types import Observation


def monitor(job: str, source: MetricsSource, since: float | None, until: float) -> Observation:
    """Monitor: the job's metrics since the previous loop."""
    return source.observe(job, since, until)


def unavailable(job: str, scaleout: int, reason: str) -> Observation:
    """An empty observation that carries why nothing could be read: the loop holds on it."""
    empty = np.array([], dtype=float)
    return Observation(job=job, timestamps=empty, workload=empty, throughput={}, cpu={}, lag=empty,
                       uptime_s=empty, scaleout=max(scaleout, 1), holds=(reason,))


def observe_or_hold(job: str, source: MetricsSource, since: float | None, until: float, scaleout: int,
                    call: Callable[..., Observation] = monitor) -> Observation:
    """Run monitor; a source that still fails (after its retries) becomes a hold, never a crash."""
    try:
        return call(job, source, since, until)
    except ConnectorError as exc:
        return unavailable(job, scaleout, f"metrics unavailable: {exc}")


def agree(obs: Observation, reported: int | None) -> Observation:
    """Hold while the scale target and the metrics disagree on the scale-out (a rescale in progress, a failing
    pod): acting on either number could undo a rescale or bypass the scale-in stabilisation."""
    if reported is None or obs.timestamps.size == 0 or obs.scaleout == reported:
        return obs
    reason = (f"the scale target reports {reported} but the metrics show {obs.scaleout} workers "
              "(a rescale in progress or a failing pod): holding until they agree")
    return replace(obs, holds=(*obs.holds, reason))
