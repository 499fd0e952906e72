"""The simulator as a Prometheus exporter: Flink metric names, one sample per simulated second with its
simulated timestamp, each second served once; stepped by a test or run on the wall clock."""

from __future__ import annotations

import time

import numpy as np
import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from daedalus.sim.exporter import SimExporter
from daedalus.sim.simulator import SimConfig, Simulator

LABELS = {"namespace": "streaming", "cluster": "sim-flink"}


def _scrape(url: str) -> dict[str, list]:
    families = text_string_to_metric_families(requests.get(url, timeout=5).text)
    return {f.name: f.samples for f in families}


def test_each_second_is_served_once_with_its_simulated_timestamp():
    sim = Simulator(np.full(120, 300_000.0), SimConfig(max_scaleout=4), seed=1, initial_scaleout=3)
    direct = Simulator(np.full(120, 300_000.0), SimConfig(max_scaleout=4), seed=1, initial_scaleout=3)
    with SimExporter(sim, LABELS, "events") as exporter:
        exporter.step(10)
        direct.advance(10)
        scraped = _scrape(exporter.url)
        obs = direct.observe(direct.config.start, direct.now)
        thr = [s for s in scraped["flink_taskmanager_job_task_operator_numRecordsOutPerSecond"]
               if s.labels["pod"] == "worker-1"]
        assert [s.timestamp for s in thr] == obs.timestamps.tolist()
        assert [s.value for s in thr] == obs.throughput["worker-1"].tolist()
        assert {s.labels["pod"] for s in scraped["flink_taskmanager_Status_JVM_CPU_Load"]} == {
            "worker-0", "worker-1", "worker-2"}
        lag = scraped["flink_taskmanager_job_task_operator_pendingRecords"]
        for i, t in enumerate(obs.timestamps):  # the split over pods sums to the simulator's lag
            assert sum(s.value for s in lag if s.timestamp == t) == pytest.approx(obs.lag[i])
        arrivals = scraped["kafka_server_brokertopicmetrics_messagesin"]
        assert [s.value for s in arrivals] == [0.0, *np.cumsum(obs.workload).tolist()]
        assert arrivals[0].timestamp == sim.config.start  # the counter's 0 one second before the first
        tms = scraped["flink_jobmanager_numRegisteredTaskManagers"]
        assert {s.value for s in tms} == {3.0} and "job" not in tms[0].labels
        assert exporter.wait_scraped(0)
        assert all(len(v) == 0 for v in _scrape(exporter.url).values())  # served once


def test_the_exporter_is_the_jobs_scaler_and_clock():
    sim = Simulator(np.full(120, 100_000.0), SimConfig(max_scaleout=4), seed=0)
    with SimExporter(sim, LABELS) as exporter:
        assert exporter.current("sim") == 4 and exporter.now() == sim.config.start
        assert exporter.scale("sim", 2, "d-1", dry_run=True) == "dry run: would scale sim 4 → 2"
        assert exporter.scale("sim", 2, "d-1") == "scaled sim 4 → 2 (decision d-1)"
        assert exporter.current("sim") == 2


def test_on_the_wall_clock_with_a_speedup():
    sim = Simulator(np.full(600, 100_000.0), SimConfig(max_scaleout=2), seed=0)
    with SimExporter(sim, LABELS) as exporter:
        exporter.run(speedup=20)
        time.sleep(2.5)
        assert sim.now - sim.config.start in (40, 60)  # 20 simulated seconds per second
    with pytest.raises(ValueError, match="must not use `job`"):
        SimExporter(sim, {"job": "x"})
