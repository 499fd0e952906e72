"""What the offline optimum (models.planning.oracle) knows of a simulated run, and its schedules replayed: the
simulator's ground truth — arrivals, true capacities, the downtime each rescale will draw — read from a copy, so
the run itself is untouched."""

from __future__ import annotations

import copy
from collections.abc import Sequence

import numpy as np

from daedalus.models.planning.oracle import Instance
from daedalus.sim.simulator import Simulator


def instance(sim: Simulator, loop_s: int, max_rescales: int, slo_s: float) -> Instance:
    """The oracle's instance of `sim`'s whole run; called before its first rescale, so its scale-out now is the
    first loop interval's."""
    cfg = sim.config
    rng = copy.deepcopy(sim._down_rng)  # the draws the next rescales will make, in order
    noise = np.array([rng.uniform(-cfg.downtime_noise_s, cfg.downtime_noise_s) for _ in range(max_rescales)])
    return Instance(
        workload=sim._workload.copy(),
        capacities=sim.true_capacities(),
        downtime_out=np.array([max(0, round(cfg.downtime_out_s + u)) for u in noise], dtype=float),
        downtime_in=np.array([max(0, round(cfg.downtime_in_s + u)) for u in noise], dtype=float),
        initial=sim.scaleout,
        max_rescales=max_rescales,
        loop_s=loop_s,
        checkpoint_s=int(cfg.checkpoint_interval),
        slo_s=slo_s,
    )


def seconds_over_slo(sim: Simulator, scaleouts: Sequence[int], loop_s: int, slo_s: float) -> int:
    """Replay `scaleouts` (one per loop interval) on a copy of `sim` from where it stands (no rescale yet) to the
    end; the seconds whose latency exceeds the SLO."""
    replay = copy.deepcopy(sim)
    total = len(sim._workload)
    minute = replay._t // loop_s
    while replay._t < total:
        if minute < len(scaleouts) and scaleouts[minute] != replay.scaleout:
            replay.scale(scaleouts[minute])
        replay.advance(min(loop_s, total - replay._t))
        minute += 1
    return int((np.nan_to_num(replay.history().latency_s) > slo_s).sum())
