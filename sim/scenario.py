"""The paper's experimental setup: workload peak at a fraction of the true capacity at the maximum."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from daedalus.models.config import LoopConfig
from daedalus.sim.simulator import SimConfig, Simulator
from daedalus.sim.workloads import rescale_to_peak

# The loop settings a run takes from its scenario, not from `loop_overrides`, and where they come from.
SCENARIO_SETTINGS = {"max_scaleout": "the run's --max-scaleout",
                     "checkpoint_interval": "the simulated engine's checkpoint interval"}


def scenario(workload: np.ndarray, max_scaleout: int = 12, peak_utilization: float = 0.9, seed: int = 0,
             loop_overrides: Mapping[str, float] | None = None, **sim_overrides: float
             ) -> tuple[SimConfig, LoopConfig, np.ndarray]:
    """Settings for a run whose workload peaks at `peak_utilization` × true capacity at `max_scaleout`.

    `loop_overrides` change LoopConfig fields (the planner's recovery-time target, scale-in interval…)."""
    sim_config = SimConfig(max_scaleout=max_scaleout, **sim_overrides)
    probe = Simulator(np.zeros(1), sim_config, seed=seed)
    peak = peak_utilization * probe.true_capacity(max_scaleout)
    loop_config = LoopConfig(max_scaleout=max_scaleout, checkpoint_interval=sim_config.checkpoint_interval,
                             **(loop_overrides or {}))
    return sim_config, loop_config, rescale_to_peak(workload, peak)
