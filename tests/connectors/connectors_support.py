"""Shared pieces of the connectors tests: tool checks, the simulated scenario, the selector and topic."""

from __future__ import annotations

import shutil
import time

import numpy as np
import pytest

from daedalus.models.config import LoopConfig
from daedalus.sim.scenario import scenario
from daedalus.sim.simulator import SimConfig
from daedalus.sim.workloads import sine_workload

needs_prometheus = pytest.mark.skipif(shutil.which("prometheus") is None or shutil.which("promtool") is None,
                                      reason="prometheus/promtool not installed (apt-get install -y prometheus)")
SELECTOR = {"namespace": "streaming", "cluster": "sim-flink"}
TOPIC = "sim-events"
# The exporter serves exact per-second counter values: irate gives the arrivals of each second exactly.
IRATE_WORKLOAD = "sum(irate(kafka_server_brokertopicmetrics_messagesin_total{topic=${source.topic}}[5s]))"


def sim_hour(seed: int = 0, hours: float = 1.0) -> tuple[SimConfig, LoopConfig, np.ndarray]:
    """A simulated hour that ends about two minutes ago: Prometheus accepts it (3 h out-of-order window)."""
    sim_config, loop_config, workload = scenario(sine_workload(hours=hours), 12, 0.9, seed)
    start = float(int(time.time()) - int(hours * 3600) - 120)
    return SimConfig(**{**sim_config.__dict__, "start": start}), loop_config, workload
