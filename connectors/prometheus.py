"""Monitor through Prometheus: the job's metrics since the previous loop as one aligned Observation.

Range queries at a fixed step, on a grid aligned to the step (so consecutive loops neither overlap nor
skip a sample). Per-worker series are aligned by pod; a worker without a sample at a step is NaN there.
Everything that makes the data doubtful becomes a hold reason in `Observation.holds` — no data, partial
series, stale series, counter resets, NaN — and the loop holds instead of guessing. When the job's
scale-out itself cannot be read (Prometheus unreachable, timing out or failing after the bounded retries,
or no scaleout series), `observe` raises ConnectorError: the monitor task turns it into a hold with the
scale-out the scaler reports.
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import numpy as np
import requests
from prometheus_api_client import PrometheusApiClientException, PrometheusConnect
from pydantic import Field, HttpUrl
from urllib3.util.retry import Retry

from daedalus.connectors.promql import JOB_KEYS, WORKER_KEYS, WORKER_LABEL, QuerySet
from daedalus.connectors.settings import Duration, Strict
from daedalus.models.errors import ConfigurationError, ConnectorError
from daedalus.models.types import Observation

if TYPE_CHECKING:  # the jobs file composes this connector's settings; only its type is needed here
    from daedalus.connectors.jobs import JobSpec

FIRST_WINDOW_S = 600.0  # with no previous loop, look back this far (as the simulator does)
RETRY_STATUS = (429, 500, 502, 503, 504)


@dataclass(frozen=True)
class Series:
    """One metric on the step grid: values (NaN where absent) and where a sample was present."""

    values: np.ndarray
    present: np.ndarray


def _grid(since: float | None, until: float, step: float) -> tuple[float, float]:
    end = math.floor(until / step) * step
    start = (math.floor(since / step) + 1) * step if since is not None else end - FIRST_WINDOW_S + step
    return start, end


def _count(mask: np.ndarray) -> int:
    return int(np.count_nonzero(mask))


class PrometheusSource:
    """MetricsSource for Flink, Kafka Streams and Spark jobs through Prometheus (prometheus-api-client)."""

    def __init__(self, job: str, queries: QuerySet, url: str, step_s: float = 15.0, timeout_s: float = 10.0,
                 retries: int = 3, backoff_s: float = 0.2) -> None:
        if step_s < 1 or step_s != int(step_s):
            raise ConfigurationError(f"job {job!r}: field prometheus.step: whole seconds ≥ 1 s, got {step_s}")
        self.job, self.queries, self.url = job, queries, url.rstrip("/")
        self.step_s = float(step_s)
        self.timeout_s, self.retries = timeout_s, retries
        retry = Retry(total=retries, connect=retries, read=retries, status=retries, backoff_factor=backoff_s,
                      status_forcelist=RETRY_STATUS, allowed_methods=frozenset({"GET"}),
                      raise_on_status=False)
        self._prom = PrometheusConnect(url=self.url, disable_ssl=True, retry=retry, timeout=timeout_s)
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix=f"prometheus-{job}")

    @classmethod
    def from_spec(cls, spec: JobSpec) -> PrometheusSource:
        """From a jobs-file entry; template errors name the job and field."""
        if spec.prometheus is None:
            raise ConfigurationError(
                f"job {spec.name!r}: field prometheus: engine {spec.engine!r} needs prometheus.url")
        p = spec.prometheus
        stale = 2 * p.step if p.stale_after is None else p.stale_after
        queries = QuerySet(spec.name, spec.engine, spec.selector, spec.source, spec.queries, 4 * p.step, stale)
        return cls(spec.name, queries, str(p.url), p.step, p.timeout, p.retries)

    # --- HTTP ---------------------------------------------------------------------------------

    def _call(self, key: str, query: str, fn: Any, *args: Any, **params: str) -> list[dict[str, Any]]:
        try:
            return fn(query, *args, params={"timeout": f"{self.timeout_s:g}s", **params})
        except PrometheusApiClientException as exc:
            raise ConnectorError(f"prometheus {self.url}: the {key} query failed ({exc}); query: {query}") from exc
        except requests.RequestException as exc:
            raise ConnectorError(
                f"prometheus {self.url} unreachable or timing out after {self.retries} retries "
                f"({type(exc).__name__}: {exc}); the {key} query was: {query}") from exc

    def _range(self, key: str, start: float, end: float, range_s: float) -> list[dict[str, Any]]:
        return self._call(key, self.queries.query(key, range_s), self._prom.custom_query_range,
                          datetime.fromtimestamp(start, UTC), datetime.fromtimestamp(end, UTC), f"{self.step_s:g}")

    def _instant(self, key: str, at: float, range_s: float) -> list[dict[str, Any]]:
        return self._call(key, self.queries.query(key, range_s), self._prom.custom_query, time=f"{at:.3f}")

    # --- alignment ----------------------------------------------------------------------------

    @staticmethod
    def _points(result: dict[str, Any]) -> dict[float, float]:
        return {float(t): float(v) for t, v in result.get("values", ())}

    @staticmethod
    def _align(points: dict[float, float], ts: np.ndarray) -> Series:
        values = np.full(ts.size, np.nan)
        present = np.zeros(ts.size, dtype=bool)
        index = {t: i for i, t in enumerate(ts.tolist())}
        for t, v in points.items():
            i = index[t]
            values[i], present[i] = v, True
        return Series(values, present)

    def observe(self, job: str, since: float | None, until: float) -> Observation:
        """Samples on the step grid with since < t ≤ until (the last 600 s when since is None)."""
        start, end = _grid(since, until, self.step_s)
        range_s = max(end - (start - self.step_s), self.step_s)
        if start > end:
            return self._empty(job, until, range_s)
        # The queries are independent: run them side by side (Prometheus evaluates them in parallel).
        futures = {key: self._pool.submit(self._range, key, start, end, range_s) for key in (*JOB_KEYS, *WORKER_KEYS)}
        resets = self._pool.submit(self._resets, end, range_s) if self.queries.has("resets") else None
        raw = {key: f.result() for key, f in futures.items()}
        holds: list[str] = []
        job_points: dict[str, dict[float, float]] = {}
        for key in JOB_KEYS:
            results = raw[key]
            if not results:
                holds.append(f"no data for {key}: `{self.queries.query(key, range_s)}` matched no series "
                             "(check the selector and the metric names)")
            elif len(results) > 1:
                holds.append(f"{key} query returned {len(results)} series, expected one (aggregate it)")
            job_points[key] = self._points(results[0]) if len(results) == 1 else {}
        workers = {key: self._by_worker(raw[key], key, holds) for key in WORKER_KEYS}
        stamps = set().union(*(p.keys() for p in job_points.values()),
                             *(p.keys() for w in workers.values() for p in w.values()))
        ts = np.array(sorted(stamps), dtype=float)
        series = {key: self._align(job_points[key], ts) for key in JOB_KEYS}
        scaleout = series["scaleout"].values[np.isfinite(series["scaleout"].values)]
        if scaleout.size == 0:
            raise ConnectorError(f"prometheus {self.url}: job {job!r}: no current scaleout; "
                                 + "; ".join(holds or ["the scaleout series is NaN at every step"]))
        for key in JOB_KEYS:
            holds += self._job_holds(key, series[key], ts.size)
        current = max(round(float(scaleout[-1])), 1)
        throughput, cpu = self._workers(workers, ts, current, holds)
        if resets is not None:
            holds += resets.result()
        return Observation(job=job, timestamps=ts, workload=series["workload"].values, throughput=throughput,
                           cpu=cpu, lag=series["lag"].values, uptime_s=series["uptime"].values,
                           scaleout=current, step_s=self.step_s,
                           holds=tuple(holds))

    def _empty(self, job: str, until: float, range_s: float) -> Observation:
        results = self._instant("scaleout", until, range_s)
        values = [float(r["value"][1]) for r in results]
        if not values or not math.isfinite(values[0]):
            raise ConnectorError(f"prometheus {self.url}: job {job!r}: no current scaleout at {until:.0f}")
        empty = np.array([], dtype=float)
        return Observation(job=job, timestamps=empty, workload=empty, throughput={}, cpu={}, lag=empty,
                           uptime_s=empty, scaleout=max(round(values[0]), 1), step_s=self.step_s)

    def _by_worker(self, results: list[dict[str, Any]], key: str, holds: list[str]) -> dict[str, dict[float, float]]:
        out: dict[str, dict[float, float]] = {}
        for r in results:
            pod = r.get("metric", {}).get(WORKER_LABEL)
            if pod is None:
                holds.append(f"{key} series without a `{WORKER_LABEL}` label: {r.get('metric')} "
                             f"(aggregate `by ({WORKER_LABEL})`)")
                continue
            out[pod] = self._points(r)
        return out

    @staticmethod
    def _job_holds(key: str, s: Series, steps: int) -> list[str]:
        holds = []
        missing = _count(~s.present)
        if missing > 0 and s.present.any():
            holds.append(f"partial: {key} has no sample at {missing} of {steps} steps")
        nan = _count(s.present & ~np.isfinite(s.values))
        if nan:
            holds.append(f"NaN: {key} is NaN at {nan} of {steps} steps")
        return holds

    def _workers(self, workers: dict[str, dict[str, dict[float, float]]], ts: np.ndarray, scaleout: int,
                 holds: list[str]) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        thr_w, cpu_w, fresh_w = workers["throughput"], workers["cpu"], workers["fresh"]
        if not thr_w or not cpu_w:
            holds.append(f"no data for {'throughput' if not thr_w else 'cpu'}: no worker series "
                         "(check the selector and the metric names)")
        throughput: dict[str, np.ndarray] = {}
        cpu: dict[str, np.ndarray] = {}
        fresh_at_end: list[str] = []
        stale_at_end: list[tuple[str, float | None]] = []
        for pod in sorted(set(thr_w) | set(cpu_w)):
            if pod not in thr_w or pod not in cpu_w:
                holds.append(f"partial: pod {pod} reports {'CPU' if pod in cpu_w else 'throughput'} only")
                continue
            thr, c = self._align(thr_w[pod], ts), self._align(cpu_w[pod], ts)
            fresh = self._align(fresh_w.get(pod, {}), ts).present
            # Prometheus carries a sample forward for its lookback (5 min by default): without a sample of its
            # own within the staleness window, a worker's value at a step is an old one repeated.
            present = thr.present & c.present & fresh
            if present.any():
                first, last = np.flatnonzero(present)[[0, -1]]
                gaps = _count(~present[first:last + 1])
                if gaps:
                    holds.append(f"partial: pod {pod} has no sample at {gaps} steps between its first and last")
                nan = _count(present & ~(np.isfinite(thr.values) & np.isfinite(c.values)))
                if nan:
                    holds.append(f"NaN: pod {pod} reports NaN throughput or CPU at {nan} steps")
            if ts.size and thr.present[-1] and not fresh[-1]:
                stale_at_end.append((pod, float(ts[np.flatnonzero(fresh)[-1]]) if fresh.any() else None))
            elif ts.size and present[-1]:
                fresh_at_end.append(pod)
            throughput[pod] = np.where(present, thr.values, np.nan)
            cpu[pod] = np.where(present, c.values, np.nan)
        if stale_at_end and len(fresh_at_end) < scaleout:
            window = self.queries.stale_window
            for pod, last in stale_at_end:
                when = "never in this window" if last is None else f"last at {last:.0f}"
                holds.append(f"stale: pod {pod} has no sample within {window} of {ts[-1]:.0f} ({when}) while the "
                             f"job counts {scaleout} workers: pod gone or not scraped")
        return throughput, cpu

    def _resets(self, end: float, range_s: float) -> list[str]:
        results = self._instant("resets", end, range_s)
        total = sum(float(r["value"][1]) for r in results if math.isfinite(float(r["value"][1])))
        if total > 0:
            return [f"counter reset: {total:.0f} reset(s) within the last {range_s:.0f} s "
                    f"(`{self.queries.query('resets', range_s)}`): rates across a restart are not trusted"]
        return []


class PrometheusSettings(Strict):
    """Where a job's metrics are read (`prometheus:` in the jobs file)."""

    url: HttpUrl
    timeout: Duration = 10.0
    step: Duration = 15.0  # range-query resolution
    retries: int = Field(3, ge=0, le=10)
    stale_after: Duration | None = None  # a worker's newest sample older than this is stale (default 2 × step)
