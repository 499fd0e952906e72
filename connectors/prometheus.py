"""Monitor through Prometheus: the job's metrics since the previous loop as one aligned Observation.

Range queries at a fixed step, on a grid aligned to the step (so consecutive loops neither overlap nor
skip a sample). Per-worker series are aligned by the worker label (`pod`, or the job's `worker_label`: `tm_id` for a
standalone Flink); a worker without a sample at a step is NaN there.
Everything that makes the data doubtful becomes a hold reason in `Observation.holds` — no data, partial
series, stale series, counter resets, NaN — and the loop holds instead of guessing. When the job's
scale-out itself cannot be read (Prometheus unreachable, timing out or failing after the bounded retries,
or no scaleout series), `observe` raises ConnectorError: the monitor task turns it into a hold with the
scale-out the scaler reports.

One deadline bounds a whole observation (`prometheus.deadline`): every request's timeout, retry and backoff
fits in what is left of it, and past it `observe` raises "metrics too slow" with no query left running.
Credentials never sit in the URL (the jobs file refuses them there): they come from the environment or a
Prefect Secret block when the source is built, and every URL or HTTP error text in a message is redacted.
TLS is verified by default (`prometheus.tls` names a CA bundle or a client certificate).
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Annotated, Any, Literal, NamedTuple, Protocol

import numpy as np
import requests
from prometheus_api_client import PrometheusApiClientException, PrometheusConnect
from pydantic import Field, HttpUrl, field_validator, model_validator
from tenacity import Retrying, retry_if_exception, stop_after_attempt
from urllib3.util import Retry, Timeout

from daedalus.connectors.fields import BlockName, Duration, EnvName, Strict, invalid, redact, secret
from daedalus.connectors.promql import CHECK_KEYS, JOB_KEYS, STAGE_KEYS, STAGE_LABEL, WORKER_KEYS, QuerySet
from daedalus.models.errors import ConfigurationError, ConnectorError
from daedalus.models.types import Observation, StageLoad


class JobSpec(Protocol):
    """What a Prometheus source reads of its jobs-file entry (`connectors.jobs.JobSpec`, which composes this
    module's settings: naming the class here would put the two modules in a circle)."""

    @property
    def name(self) -> str: ...
    @property
    def engine(self) -> str: ...
    @property
    def prometheus(self) -> PrometheusSettings | None: ...
    @property
    def selector(self) -> dict[str, str]: ...
    @property
    def source(self) -> dict[str, str]: ...
    @property
    def queries(self) -> dict[str, str]: ...
    @property
    def worker_label(self) -> str: ...

FIRST_WINDOW_S = 600.0  # with no previous loop, look back this far (as the simulator does)
RETRY_STATUS = (429, 500, 502, 503, 504)
_STATUS = re.compile(r"HTTP Status Code (\d+)")  # how prometheus-api-client 0.7.2 reports a non-200 answer


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


class _OutOfTime(Exception):
    """The observation's deadline passed (or it gave up) before this query could be sent: not retried."""


def _retryable(exc: BaseException) -> bool:
    """Connection errors, timeouts, and the HTTP statuses worth another try (RETRY_STATUS)."""
    if isinstance(exc, requests.RequestException):
        return True
    status = _STATUS.match(str(exc)) if isinstance(exc, PrometheusApiClientException) else None
    return status is not None and int(status.group(1)) in RETRY_STATUS


@dataclass(frozen=True)
class _Budget:
    """One observation's deadline (on the monotonic clock), shared by its queries; `stop` is set when observe
    gives up on them, which ends their backoff at once."""

    until: float
    stop: threading.Event = field(default_factory=threading.Event)

    def left(self) -> float:
        return self.until - time.monotonic()


class PrometheusSource:
    """MetricsSource for Flink, Kafka Streams and Spark jobs through Prometheus (prometheus-api-client)."""

    def __init__(self, job: str, queries: QuerySet, url: str, step_s: float = 15.0, timeout_s: float = 10.0,
                 retries: int = 3, backoff_s: float = 0.2, deadline_s: float = 20.0,
                 headers: Mapping[str, str] | None = None, auth: tuple[str, str] | None = None,
                 verify: bool | str = True, cert: str | tuple[str, str] | None = None) -> None:
        if step_s < 1 or step_s != int(step_s):
            raise ConfigurationError(f"job {job!r}: field prometheus.step: whole seconds ≥ 1 s, got {step_s}")
        self.job, self.queries = job, queries
        self.url = redact(url.rstrip("/"))  # the only form of the URL any message shows
        self.step_s = float(step_s)
        self.timeout_s, self.retries, self.backoff_s, self.deadline_s = timeout_s, retries, backoff_s, deadline_s
        # Credential values, longest first: a proxy or server may echo the request's headers in an error body.
        values = [v for h in (headers or {}).values() for v in (h, *h.split()[1:])] + ([auth[1]] if auth else [])
        self._secrets = sorted({v for v in values if len(v) >= 4}, key=len, reverse=True)
        session = requests.Session()
        session.verify, session.cert = verify, cert
        # Retries are ours (`_call`): urllib3 would give each retry a fresh full timeout, past the deadline.
        self._prom = PrometheusConnect(url=url.rstrip("/"), headers=dict(headers) if headers else None, auth=auth,
                                       retry=Retry(0), session=session, timeout=timeout_s)

    @classmethod
    def from_spec(cls, spec: JobSpec) -> PrometheusSource:
        """From a jobs-file entry; template errors name the job and field. Credentials are read now."""
        if spec.prometheus is None:
            raise ConfigurationError(
                f"job {spec.name!r}: field prometheus: engine {spec.engine!r} needs prometheus.url")
        p = spec.prometheus
        stale = 2 * p.step if p.stale_after is None else p.stale_after
        queries = QuerySet(spec.name, spec.engine, spec.selector, spec.source, spec.queries, 4 * p.step, stale,
                           spec.worker_label)
        login = p.auth.credentials(spec.name) if p.auth is not None else Credentials()
        tls = p.tls if p.tls is not None else TlsSettings()
        return cls(spec.name, queries, str(p.url), p.step, p.timeout, p.retries, deadline_s=p.deadline,
                   headers=login.headers, auth=login.basic, verify=tls.verify(spec.name), cert=tls.cert(spec.name))

    # --- HTTP ---------------------------------------------------------------------------------

    def _call(self, key: str, query: str, budget: _Budget, fn: Any, *args: Any, **params: str
              ) -> list[dict[str, Any]]:
        """One query, retried on connection errors, timeouts and 429/5xx with backoff, all within the budget.

        Errors are raised `from None`: the HTTP library's own exception carries the URL unredacted.
        """
        def once() -> list[dict[str, Any]]:
            left = budget.left()
            if left <= 0 or budget.stop.is_set():
                raise _OutOfTime
            timeout = min(self.timeout_s, left)
            return fn(query, *args, params={"timeout": f"{timeout:.3f}", **params}, timeout=Timeout(total=timeout))

        # The policy: `retries` more attempts on a connection error, a timeout or 429/5xx, backing off from
        # `backoff_s` (doubling) but never past the budget; a budget's stop ends the backoff at once.
        policy = Retrying(retry=retry_if_exception(_retryable), stop=stop_after_attempt(self.retries + 1),
                          wait=lambda rs: min(self.backoff_s * 2 ** (rs.attempt_number - 1), max(budget.left(), 0.0)),
                          sleep=budget.stop.wait, reraise=True)
        try:
            return policy(once)
        except _OutOfTime:
            raise ConnectorError(self._too_slow([key])) from None
        except PrometheusApiClientException as exc:
            raise ConnectorError(f"prometheus {self.url}: the {key} query failed ({self._scrub(str(exc))}); "
                                 f"query: {query}") from None
        except requests.RequestException as exc:
            raise ConnectorError(
                f"prometheus {self.url} unreachable or timing out after {self.retries} retries "
                f"({type(exc).__name__}: {self._scrub(str(exc))}); the {key} query was: {query}") from None

    def _scrub(self, text: str) -> str:
        """An HTTP error's text without URL user-info and without any credential value this source sends."""
        text = redact(text)
        for value in self._secrets:
            text = text.replace(value, "***")
        return text

    def _too_slow(self, keys: list[str]) -> str:
        return (f"metrics too slow: prometheus {self.url} did not answer the {', '.join(keys)} "
                f"quer{'y' if len(keys) == 1 else 'ies'} within the observation's deadline of {self.deadline_s:g} s "
                "(prometheus.deadline)")

    def _gather(self, budget: _Budget, calls: dict[str, Callable[[], Any]]) -> dict[str, Any]:
        """Run the calls side by side (Prometheus evaluates queries in parallel); at the first failure or at the
        deadline, give up on the rest: queued ones are cancelled, running ones end within the deadline, since
        every request's timeout does."""
        pool = ThreadPoolExecutor(max_workers=min(4, len(calls)), thread_name_prefix=f"prometheus-{self.job}")
        try:
            futures = {key: pool.submit(call) for key, call in calls.items()}
            done, pending = wait(futures.values(), timeout=max(budget.left(), 0.0), return_when=FIRST_EXCEPTION)
            for future in futures.values():
                error = future.exception() if future in done else None
                if error is not None:
                    raise error
            if pending:
                raise ConnectorError(self._too_slow([key for key, f in futures.items() if f in pending]))
            return {key: f.result() for key, f in futures.items()}
        finally:
            budget.stop.set()
            pool.shutdown(wait=False, cancel_futures=True)

    def _range(self, key: str, budget: _Budget, start: float, end: float, range_s: float) -> list[dict[str, Any]]:
        return self._call(key, self.queries.query(key, range_s), budget, self._prom.custom_query_range,
                          datetime.fromtimestamp(start, UTC), datetime.fromtimestamp(end, UTC), f"{self.step_s:g}")

    def _instant(self, key: str, budget: _Budget, at: float, range_s: float) -> list[dict[str, Any]]:
        return self._call(key, self.queries.query(key, range_s), budget, self._prom.custom_query, time=f"{at:.3f}")

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
        budget = _Budget(time.monotonic() + self.deadline_s)
        start, end = _grid(since, until, self.step_s)
        range_s = max(end - (start - self.step_s), self.step_s)
        if start > end:
            return self._empty(job, until, range_s, budget)
        calls: dict[str, Callable[[], Any]] = {key: partial(self._range, key, budget, start, end, range_s)
                                               for key in (*JOB_KEYS, *WORKER_KEYS, *CHECK_KEYS)}
        if self.queries.has("resets"):
            calls["resets"] = partial(self._resets, budget, end, range_s)
        if all(self.queries.has(key) for key in STAGE_KEYS):
            calls["stages"] = partial(self._stages, budget, end, range_s)
        raw = self._gather(budget, calls)
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
        holds += self._duplicates(raw["duplicates"], self.queries.worker_label)
        throughput, cpu = self._workers(workers, ts, current, holds)
        holds += raw.get("resets", [])
        return Observation(job=job, timestamps=ts, workload=series["workload"].values, throughput=throughput,
                           cpu=cpu, lag=series["lag"].values, uptime_s=series["uptime"].values,
                           scaleout=current, step_s=self.step_s, window_s=self.queries.window_s,
                           holds=tuple(holds), stages=raw.get("stages", ()))

    def _empty(self, job: str, until: float, range_s: float, budget: _Budget) -> Observation:
        call = partial(self._instant, "scaleout", budget, until, range_s)
        results = self._gather(budget, {"scaleout": call})["scaleout"]
        values = [float(r["value"][1]) for r in results]
        if not values or not math.isfinite(values[0]):
            raise ConnectorError(f"prometheus {self.url}: job {job!r}: no current scaleout at {until:.0f}")
        empty = np.array([], dtype=float)
        return Observation(job=job, timestamps=empty, workload=empty, throughput={}, cpu={}, lag=empty,
                           uptime_s=empty, scaleout=max(round(values[0]), 1), step_s=self.step_s)

    def _by_worker(self, results: list[dict[str, Any]], key: str, holds: list[str]) -> dict[str, dict[float, float]]:
        label = self.queries.worker_label
        out: dict[str, dict[float, float]] = {}
        for r in results:
            pod = r.get("metric", {}).get(label)
            if pod is None:
                holds.append(f"{key} series without a `{label}` label: {r.get('metric')} (aggregate `by ({label})`)")
                continue
            out[pod] = self._points(r)
        return out

    @staticmethod
    def _duplicates(results: list[dict[str, Any]], worker_label: str) -> list[str]:
        """A hold per worker exported more than once, naming the labels that tell its series apart."""
        series: dict[str, list[dict[str, str]]] = {}
        for r in results:
            labels = r.get("metric", {})
            series.setdefault(labels.get(worker_label, "?"), []).append(labels)
        holds = []
        for pod, found in sorted(series.items()):
            differ = sorted({k for s in found for k in s if len({t.get(k) for t in found}) > 1})
            named = sorted(" ".join(f"{k}={s.get(k, '')}" for k in differ) for s in found)
            holds.append(f"duplicate series: pod {pod} is scraped {len(found)}× ({', '.join(named)}): its throughput "
                         "would count more than once; fix the scrape config (one scrape job and target per pod)")
        return holds

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

    def _stages(self, budget: _Budget, end: float, range_s: float) -> tuple[StageLoad, ...]:
        """Each stage's load at the end of the window; none when a query fails or a stage lacks a series: the stages
        only say where the bottleneck is, and the loop scales without them."""
        try:
            values = {key: {r["metric"].get(STAGE_LABEL, ""): float(r["value"][1])
                            for r in self._instant(key, budget, end, range_s)} for key in STAGE_KEYS}
        except (ConnectorError, KeyError, IndexError, TypeError, ValueError):
            return ()
        names = sorted(set.intersection(*(set(v) for v in values.values())) - {""})
        return tuple(StageLoad(name, max(1, round(values["stage_parallelism"][name])),
                               min(max(values["stage_busy"][name], 0.0), 1.0),
                               min(max(values["stage_backpressure"][name], 0.0), 1.0),
                               max(values["stage_records"][name], 0.0), source=name.startswith("Source"))
                     for name in names
                     if all(math.isfinite(values[key][name]) for key in STAGE_KEYS))

    def _resets(self, budget: _Budget, end: float, range_s: float) -> list[str]:
        results = self._instant("resets", budget, end, range_s)
        total = sum(float(r["value"][1]) for r in results if math.isfinite(float(r["value"][1])))
        if total > 0:
            return [f"counter reset: {total:.0f} reset(s) within the last {range_s:.0f} s "
                    f"(`{self.queries.query('resets', range_s)}`): rates across a restart are not trusted"]
        return []


class Credentials(NamedTuple):
    """What the HTTP client sends: extra headers (a bearer token) or a basic-auth pair."""

    headers: dict[str, str] | None = None
    basic: tuple[str, str] | None = None


def _one_of(env: str | None, block: str | None, what: str) -> None:
    if (env is None) == (block is None):
        raise invalid(f"set exactly one of {what}_env (an environment variable where the loop runs) or "
                      f"{what}_secret (a Prefect Secret block)")


class BearerAuth(Strict):
    """`Authorization: Bearer <token>`, the token from the environment or a Prefect Secret block."""

    kind: Literal["bearer"]
    token_env: EnvName | None = None
    token_secret: BlockName | None = None

    @model_validator(mode="after")
    def _one_source(self) -> BearerAuth:
        _one_of(self.token_env, self.token_secret, "token")
        return self

    def credentials(self, job: str) -> Credentials:
        token = secret(job, "prometheus.auth.token", self.token_env, self.token_secret)
        return Credentials(headers={"Authorization": f"Bearer {token}"})


class BasicAuth(Strict):
    """HTTP basic authentication, the password from the environment or a Prefect Secret block."""

    kind: Literal["basic"]
    username: Annotated[str, Field(min_length=1)]
    password_env: EnvName | None = None
    password_secret: BlockName | None = None

    @model_validator(mode="after")
    def _one_source(self) -> BasicAuth:
        _one_of(self.password_env, self.password_secret, "password")
        return self

    def credentials(self, job: str) -> Credentials:
        return Credentials(basic=(self.username, secret(job, "prometheus.auth.password", self.password_env,
                                                        self.password_secret)))


def _readable(job: str, where: str, path: str) -> str:
    if not Path(path).is_file():
        raise ConfigurationError(f"job {job!r}: field prometheus.tls.{where}: no readable file at {path}")
    return path


class TlsSettings(Strict):
    """How an https Prometheus is verified (always, unless told otherwise), and the client certificate."""

    ca_file: str | None = None  # PEM bundle of the CAs that sign Prometheus' certificate (default: the system's)
    cert_file: str | None = None  # client certificate (PEM), when Prometheus asks for one (mutual TLS)
    key_file: str | None = None  # its private key, unless cert_file holds it
    insecure_skip_verify: bool = False  # anyone on the path could then read the metrics and the credentials

    @model_validator(mode="after")
    def _consistent(self) -> TlsSettings:
        if self.key_file is not None and self.cert_file is None:
            raise invalid("key_file is the key of a client certificate: set cert_file too")
        if self.insecure_skip_verify and self.ca_file is not None:
            raise invalid("ca_file and insecure_skip_verify: true contradict each other: keep ca_file")
        return self

    def verify(self, job: str) -> bool | str:
        """`verify` for requests: a CA bundle's path, True (the system's CAs) or False."""
        if self.ca_file is not None:
            return _readable(job, "ca_file", self.ca_file)
        return not self.insecure_skip_verify

    def cert(self, job: str) -> str | tuple[str, str] | None:
        """`cert` for requests: the client certificate, with its key if apart."""
        if self.cert_file is None:
            return None
        cert = _readable(job, "cert_file", self.cert_file)
        return cert if self.key_file is None else (cert, _readable(job, "key_file", self.key_file))


class PrometheusSettings(Strict):
    """Where a job's metrics are read (`prometheus:` in the jobs file)."""

    url: HttpUrl
    auth: Annotated[BearerAuth | BasicAuth, Field(discriminator="kind")] | None = None
    tls: TlsSettings | None = None  # for an https url; verified against the system's CAs without it
    timeout: Duration = 10.0  # per request, capped by what is left of the deadline
    deadline: Duration = 20.0  # for one whole observation: all queries, retries and backoff
    step: Duration = 15.0  # range-query resolution
    retries: int = Field(3, ge=0, le=10)
    stale_after: Duration | None = None  # a worker's newest sample older than this is stale (default 2 × step)

    @field_validator("url")
    @classmethod
    def _no_credentials(cls, url: HttpUrl) -> HttpUrl:
        if url.username is not None or url.password is not None:
            raise invalid("credentials do not belong in the URL (they would show in holds, logs, artifacts and "
                          "status files): remove 'user:password@' and set prometheus.auth, e.g. {kind: basic, "
                          "username: NAME, password_env: VARIABLE} or {kind: bearer, token_env: VARIABLE} "
                          "(password_secret / token_secret: a Prefect Secret block)")
        return url

    @model_validator(mode="after")
    def _tls_needs_https(self) -> PrometheusSettings:
        if self.tls is not None and self.url.scheme != "https":
            raise invalid("tls is set for a plain http url: use https:// (or drop tls)")
        return self
