"""The simulated job as a Prometheus exporter that speaks Flink's (and a Kafka broker's) metric names.

So the Prometheus monitor can be tested end to end against a real Prometheus server without a Flink
cluster. Every simulated second is exposed once, with its simulated timestamp (explicit timestamps in the
exposition), at the next scrape: a scrape drains what was published since the previous one, so a
simulated hour can be stepped through in seconds and Prometheus still stores one sample per second.

Series (labels: the job's selector labels, plus `pod` for TaskManager series):
- `flink_taskmanager_job_task_operator_numRecordsOutPerSecond` (source operator), per TaskManager pod;
- `flink_taskmanager_Status_JVM_CPU_Load`, per pod;
- `flink_taskmanager_job_task_operator_pendingRecords`, per pod: the consumer lag, split over the pods by
  the partition weights they read (the simulator knows the total exactly; the split is an approximation);
- `flink_jobmanager_numRegisteredTaskManagers` and `flink_jobmanager_job_uptime` (ms);
- `kafka_server_brokertopicmetrics_messagesin_total{topic}`: arrivals, a counter starting at 0.

Two ways to drive it: `step(seconds)` from a test (the simulator advances, the samples are queued), or
`run(speedup)`, a background thread advancing `speedup` simulated seconds per wall-clock second.
The exporter is also the job's scaler and clock (`current`, `scale`, `now`), under one lock.
`daedalus.runtime.prometheus.local_prometheus()` starts a real Prometheus server that scrapes it (tests,
`daedalus bench monitor`).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

import numpy as np
import requests
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from daedalus.sim.simulator import Simulator

SOURCE_OPERATOR = "Source: sim-events"
TM_PREFIX = "flink_taskmanager"


@dataclass(frozen=True)
class _Second:
    """One simulated second's samples, as the exposition needs them."""

    t: float
    throughput: dict[str, float]
    cpu: dict[str, float]
    lag: dict[str, float]
    taskmanagers: int
    uptime_ms: float
    arrived: float  # cumulative arrivals (the broker's counter)
    first: bool = False  # the very first second: the counter's 0 goes out one second before it


class SimExporter:
    """Serves a running Simulator's per-second metrics on a loopback port."""

    def __init__(self, sim: Simulator, labels: Mapping[str, str], topic: str = "sim-events",
                 host: str = "127.0.0.1", port: int = 0) -> None:
        if "job" in labels or "pod" in labels:
            raise ValueError("labels must not use `job` (it clashes with the scrape job) or `pod` (the worker label)")
        self.sim, self.labels, self.topic = sim, dict(labels), topic
        self.lock = threading.RLock()
        self._scraped = threading.Condition(self.lock)
        self._pending: list[_Second] = []
        self._published = 0  # seconds queued so far
        self._served = 0  # seconds handed to a scrape so far
        self._arrived = 0.0
        self._taken: list[_Second] = []  # what the newest scrape took, until Prometheus is seen holding it
        self._last = sim.now
        self._registry = CollectorRegistry(auto_describe=False)
        self._registry.register(self)
        self._server, self._thread = start_http_server(port, addr=host, registry=self._registry)
        self.port = self._server.server_port
        self.url = f"http://{host}:{self.port}/metrics"
        self._clock: threading.Thread | None = None
        self._stop = threading.Event()

    # --- the job: clock and scaler ---------------------------------------------------------------

    def now(self) -> float:
        return self.sim.now

    def current(self, job: str) -> int:
        return self.sim.scaleout

    def scale(self, job: str, target: int, decision_id: str, dry_run: bool = False) -> str:
        with self.lock:
            before = self.sim.scaleout
            if dry_run:
                return f"dry run: would scale {job} {before} → {target}"
            self.sim.scale(target)
        return f"scaled {job} {before} → {target} (decision {decision_id})"

    # --- driving -----------------------------------------------------------------------------

    def step(self, seconds: int) -> None:
        """Advance the simulator and queue its new seconds for the next scrape."""
        with self.lock:
            self.sim.advance(seconds)
            self._queue(self._last, self.sim.now)
            self._last = self.sim.now

    def wait_scraped(self, timeout: float = 10.0) -> bool:
        """Block until a scrape has taken every queued second (False on timeout)."""
        with self._scraped:
            return self._scraped.wait_for(lambda: self._served >= self._published, timeout)

    def sync(self, prometheus_url: str, timeout: float = 30.0) -> None:
        """Block until Prometheus holds the newest queued second.

        A scrape that timed out stored nothing (Prometheus appends a scrape all or nothing), but it did take
        the samples: when Prometheus does not show the newest second soon after a scrape, the taken samples
        are queued again for the next scrape.
        """
        deadline = time.monotonic() + timeout
        selector = ", ".join(f'{k}="{v}"' for k, v in sorted(self.labels.items()))
        query = {"query": f"timestamp(flink_jobmanager_job_uptime{{{selector}}})", "time": f"{self._last:.3f}"}

        def stored() -> bool:
            result = requests.get(f"{prometheus_url}/api/v1/query", params=query, timeout=5).json()["data"]["result"]
            return bool(result) and float(result[0]["value"][1]) >= self._last

        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not self.wait_scraped(left):
                raise TimeoutError(f"no scrape of {self.url} stored the second {self._last:.0f} within {timeout} s")
            try:
                _wait(stored, min(5.0, max(deadline - time.monotonic(), 0.1)), "")
                return
            except TimeoutError:
                with self.lock:  # the scrape that took them failed: serve them again
                    self._pending = self._taken + self._pending
                    self._served -= len(self._taken)
                    self._taken = []

    def run(self, speedup: float = 1.0) -> None:
        """Advance on the wall clock, `speedup` simulated seconds per second, in a background thread,
        until the workload ends or `close()`."""
        def tick() -> None:
            carry = 0.0
            while not self._stop.wait(1.0):
                carry += speedup
                seconds, carry = int(carry), carry - int(carry)
                try:
                    self.step(seconds)
                except ValueError:  # the workload has ended
                    return

        self._clock = threading.Thread(target=tick, name="sim-exporter-clock", daemon=True)
        self._clock.start()

    def close(self) -> None:
        self._stop.set()
        if self._clock is not None:
            self._clock.join(timeout=5)
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> SimExporter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- samples -----------------------------------------------------------------------------

    def _queue(self, since: float, until: float) -> None:
        obs = self.sim.observe(since, until)
        weights = self.sim.partition_weights
        for i, t in enumerate(obs.timestamps.tolist()):
            thr = {w: float(v[i]) for w, v in obs.throughput.items() if np.isfinite(v[i])}
            n = len(thr)
            share = np.bincount(np.arange(weights.size) % n, weights=weights, minlength=n) if n else np.zeros(0)
            lag = {w: float(obs.lag[i] * share[k]) for k, w in enumerate(sorted(thr, key=_slot))}
            first = self._published == 0 and i == 0
            self._arrived += float(obs.workload[i])
            self._pending.append(_Second(t, thr, {w: float(obs.cpu[w][i]) for w in thr}, lag, n,
                                         float(obs.uptime_s[i]) * 1000.0, self._arrived, first))
        self._published += obs.timestamps.size

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        """Called by each scrape: hand over everything queued since the previous scrape."""
        with self.lock:
            pending, self._pending = self._pending, []
            if pending:
                self._taken = pending
            self._served = self._published
            self._scraped.notify_all()
        names = sorted(self.labels)
        base = [self.labels[k] for k in names]
        thr = GaugeMetricFamily(f"{TM_PREFIX}_job_task_operator_numRecordsOutPerSecond",
                                "records/s out of the source operator", labels=[*names, "pod", "operator_name"])
        cpu = GaugeMetricFamily(f"{TM_PREFIX}_Status_JVM_CPU_Load", "CPU load of the TaskManager JVM",
                                labels=[*names, "pod"])
        lag = GaugeMetricFamily(f"{TM_PREFIX}_job_task_operator_pendingRecords", "records not yet read",
                                labels=[*names, "pod", "operator_name"])
        tms = GaugeMetricFamily("flink_jobmanager_numRegisteredTaskManagers", "registered TaskManagers",
                                labels=names)
        uptime = GaugeMetricFamily("flink_jobmanager_job_uptime", "ms since the job (re)started", labels=names)
        arrivals = CounterMetricFamily("kafka_server_brokertopicmetrics_messagesin", "messages in",
                                       labels=["topic"])
        if pending and pending[0].first:
            arrivals.add_metric([self.topic], 0.0, timestamp=pending[0].t - 1.0)
        pods = sorted({w for p in pending for w in p.throughput}, key=_slot)
        for pod in pods:  # one series' samples together, oldest first
            for p in pending:
                if pod in p.throughput:
                    thr.add_metric([*base, pod, SOURCE_OPERATOR], p.throughput[pod], timestamp=p.t)
                    cpu.add_metric([*base, pod], p.cpu[pod], timestamp=p.t)
                    lag.add_metric([*base, pod, SOURCE_OPERATOR], p.lag[pod], timestamp=p.t)
        for p in pending:
            tms.add_metric(base, p.taskmanagers, timestamp=p.t)
            uptime.add_metric(base, p.uptime_ms, timestamp=p.t)
            arrivals.add_metric([self.topic], p.arrived, timestamp=p.t)
        yield from (thr, cpu, lag, tms, uptime, arrivals)


def _slot(worker: str) -> int:
    return int(worker.rsplit("-", 1)[1])


def _wait(ok: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(requests.RequestException, KeyError, ValueError):
            if ok():
                return
        time.sleep(0.05)
    raise TimeoutError(f"prometheus not {what} after {timeout} s")
