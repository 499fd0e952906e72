"""End to end on real parts: the simulator exported with Flink metric names, scraped by a real Prometheus.

The control loop monitoring through PromQL must decide as it does reading the simulator directly: two
simulators with the same seed, one read directly, one through exporter → Prometheus → PrometheusSource, both
driven through models.loop.iteration.iterate with the PLAIN phases over a simulated hour.

The exporter is stepped by the test (not scraped on the wall clock): each simulated minute is queued with its
simulated timestamps and taken by the next scrape (every 200 ms), and the loop waits until Prometheus holds
the newest second. Stepping makes the hour take seconds instead of an hour, and exact sample timestamps make
the comparison meaningful; the query lookback is 500 ms so a removed TaskManager's series ends at once, as a
staleness marker ends it in a real scrape.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from connectors_support import IRATE_WORKLOAD, SELECTOR, TOPIC, needs_prometheus, sim_hour

from daedalus.connectors.prometheus import PrometheusSource
from daedalus.connectors.promql import QuerySet
from daedalus.models.knowledge import Knowledge
from daedalus.models.loop.iteration import PLAIN, iterate
from daedalus.models.ports import Target
from daedalus.runtime.prometheus import local_prometheus
from daedalus.sim.exporter import SimExporter
from daedalus.sim.job import SimulatedJob
from daedalus.sim.simulator import Simulator

pytestmark = [needs_prometheus, pytest.mark.slow]


def _actions(iterations: list) -> list[tuple[float, int, int]]:
    return [(it.action.time, it.action.current, it.action.target) for it in iterations
            if it.action is not None and it.action.state == "executed"]


def test_decisions_through_prometheus_match_the_direct_loop(tmp_path):
    sim_config, loop_config, workload = sim_hour(seed=3)
    # The paper's planner rescales a few times within the hour; the model-predictive default keeps 12 for the sine's
    # peak within its 30-minute horizon, which would leave nothing to compare.
    loop_config = replace(loop_config, planner="daedalus-paper")
    loops = len(workload) // 60

    direct_sim = Simulator(workload, sim_config, seed=3)
    direct = SimulatedJob(direct_sim)
    direct_target = Target("sim", metrics=direct, scaler=direct, clock=direct, config=loop_config)
    direct_knowledge = Knowledge.new("sim", loop_config)
    direct_its = []
    for _ in range(loops):
        direct_sim.advance(60)
        direct_its.append(iterate(direct_target, direct_knowledge, PLAIN))

    exported_sim = Simulator(workload, sim_config, seed=3)
    with SimExporter(exported_sim, SELECTOR, TOPIC) as exporter, \
            local_prometheus(tmp_path / "prom", [f"127.0.0.1:{exporter.port}"], "200ms", lookback="500ms") as url:
        queries = QuerySet("sim", "flink", SELECTOR, {"topic": TOPIC}, {"workload": IRATE_WORKLOAD}, 4.0, 0.5)
        source = PrometheusSource("sim", queries, url, step_s=1)
        prom_target = Target("sim", metrics=source, scaler=exporter, clock=exporter, config=loop_config)
        prom_knowledge = Knowledge.new("sim", loop_config)
        prom_its = []
        for _ in range(loops):
            exporter.step(60)
            exporter.sync(url)
            prom_its.append(iterate(prom_target, prom_knowledge, PLAIN))

    expected, got = _actions(direct_its), _actions(prom_its)
    print(f"\nrescales, direct: {expected}\nrescales, through Prometheus: {got}")
    assert len(expected) >= 3, f"the scenario should rescale a few times, got {expected}"
    assert [(a, b) for _, a, b in got] == [(a, b) for _, a, b in expected]
    # Scrape timing may move a decision by at most one loop.
    assert all(abs(g[0] - e[0]) <= 60 for g, e in zip(got, expected, strict=True))
    # What the loop saw agrees: same holds, and capacities within 1 % while the two have rescaled at the same loops.
    # Once scrape timing moves a decision by a loop, the two learn from different histories: one run's loop 53 sat
    # a loop longer at 11 through Prometheus and estimated its capacity 2 % lower (CI, the other xdist worker busy).
    same_history = next((n for n, (d, p) in enumerate(zip(direct_its, prom_its, strict=True))
                         if _actions([d]) != _actions([p])), len(direct_its))
    for n, (d, p) in enumerate(zip(direct_its, prom_its, strict=True)):
        assert p.observation.holds == (), (n, p.observation.holds)
        assert bool(d.analysis.holds) == bool(p.analysis.holds), (n, d.analysis.holds, p.analysis.holds)
        cd, cp = d.analysis.capacity(d.analysis.scaleout), p.analysis.capacity(p.analysis.scaleout)
        if n < same_history and cd == cd and cd > 0:
            assert abs(cp - cd) <= 0.01 * cd, (n, cd, cp, d.analysis.scaleout, p.analysis.scaleout,
                                               d.observation.timestamps.size, p.observation.timestamps.size)
