"""A local Flink job measured as the loop sees it: its metrics per second read back from a real Prometheus with the
loop's own queries (`sample`), the seconds it ran saturated and what it processed then, what a record cost a
worker, and a flood job that measures the saturation throughput at given parallelisms now (`flood`). Shared by the
Flink demo (runtime/flink_demo.py) and the calibration (bench/flink.py).
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import requests

from daedalus.connectors.flink_rest import FlinkRestScaler
from daedalus.connectors.promql import FLINK_SOURCE_OUT, QuerySet
from daedalus.runtime.flink import LocalFlink, Trace, TraceExporter, TraceJob

WORKER_LABEL = "tm_id"  # a standalone Flink's TaskManagers carry no `pod`


# CPU cores each of the job's TaskManagers uses (the JVM's CPU time per second), beside its CPU load (a share of
# the machine's cores) and its busy share.
CORES = ("max by (${worker}) (rate(flink_taskmanager_Status_JVM_CPU_Time[${window}]) / 1e9 and on (${worker}) "
         + FLINK_SOURCE_OUT + ")")


def flink_label(name: str) -> str:
    """A job name as Flink's Prometheus reporter publishes it in `job_name` (punctuation becomes `_`)."""
    return "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in name)


def queries(job_name: str, topic: str, cpu: str = "busy-time") -> QuerySet:
    """The loop's own Flink queries for a local job (1 s scrapes: 4 s rate window, 2 s staleness)."""
    return QuerySet(job_name, "flink", {"job_name": flink_label(job_name)}, {"topic": topic}, {"cpu": cpu}, 4.0, 2.0,
                    worker_label=WORKER_LABEL)


def range_query(url: str, query: str, start: float, end: float, step: float = 1.0) -> dict[str, dict[float, float]]:
    """Series by their worker label (or `""` for an aggregate): {time: value}."""
    r = requests.get(f"{url}/api/v1/query_range", params={"query": query, "start": f"{start:.3f}",
                                                          "end": f"{end:.3f}", "step": f"{step:g}"}, timeout=60)
    r.raise_for_status()
    out: dict[str, dict[float, float]] = {}
    for series in r.json()["data"]["result"]:
        key = series["metric"].get(WORKER_LABEL, "")
        out[key] = {float(t): float(v) for t, v in series["values"]}
    return out


@dataclass(frozen=True)
class Sampled:
    """A job's metrics per second, as the loop's queries give them (NaN where absent)."""

    ts: np.ndarray
    workload: np.ndarray
    throughput: np.ndarray  # total over the workers
    busy_min: np.ndarray  # least busy worker
    busy_max: np.ndarray
    cpu_load: np.ndarray  # largest JVM CPU load among the job's TaskManagers
    lag: np.ndarray
    scaleout: np.ndarray
    uptime: np.ndarray
    workers: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]  # tm_id → (throughput, busy, JVM CPU load)


def sample(url: str, job_name: str, topic: str, start: float, end: float, step: float = 1.0) -> Sampled:
    q, qc = queries(job_name, topic), queries(job_name, topic, "jvm-cpu-load")
    ts = np.arange(math.ceil(start / step) * step, end + 1e-9, step)

    def align(points: dict[float, float]) -> np.ndarray:
        return np.array([points.get(float(t), np.nan) for t in ts])

    def one(query: str) -> np.ndarray:
        got = range_query(url, query, ts[0], ts[-1], step) if ts.size else {}
        return align(next(iter(got.values()))) if got else np.full(ts.size, np.nan)

    thr = {w: align(p) for w, p in range_query(url, q.query("throughput"), ts[0], ts[-1], step).items()}
    busy = {w: align(p) for w, p in range_query(url, q.query("cpu"), ts[0], ts[-1], step).items()}
    cpu = {w: align(p) for w, p in range_query(url, qc.query("cpu"), ts[0], ts[-1], step).items()}
    nan = np.full(ts.size, np.nan)
    stack = (lambda d: np.vstack(list(d.values())) if d else nan[None, :])  # noqa: E731
    with np.errstate(all="ignore"), warnings_off():
        total = np.nansum(stack(thr), axis=0)
        total[np.all(np.isnan(stack(thr)), axis=0)] = np.nan
        busy_min, busy_max = np.nanmin(stack(busy), axis=0), np.nanmax(stack(busy), axis=0)
        cpu_max = np.nanmax(stack(cpu), axis=0)
    workers = {w: (thr.get(w, nan), busy.get(w, nan), cpu.get(w, nan)) for w in sorted(set(thr) | set(busy))}
    return Sampled(ts, one(q.query("workload")), total, busy_min, busy_max, cpu_max, one(q.query("lag")),
                   one(q.query("scaleout")), one(q.query("uptime")), workers)


@contextlib.contextmanager
def warnings_off() -> Any:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


def saturated(s: Sampled, backlog_s: float = 2.0, warmup_s: float = 10.0) -> np.ndarray:
    """Seconds in which the job processes as fast as it can: more than `backlog_s` seconds of arrivals waiting (the
    source then emits as fast as the job takes records, so the throughput is the capacity under the machine's load of
    that moment), past the first `warmup_s` after a (re)start (the rate window still holds the restart).

    The busy share is not a condition: on over-committed cores a saturated task waits for a core it does not get
    and reads below 1 (three one-slot workers on two cores: 0.8-0.9 with a backlog of 50,000 records)."""
    with np.errstate(invalid="ignore"):
        return ((s.lag > backlog_s * np.maximum(s.workload, 1.0)) & (s.uptime >= warmup_s)
                & np.isfinite(s.throughput) & np.isfinite(s.scaleout))


def saturation_throughput(s: Sampled, **kw: float) -> dict[int, dict[str, float]]:
    """Per parallelism: the median total throughput over its saturated seconds, and how many there were."""
    mask = saturated(s, **kw)
    out = {}
    for p in sorted({int(v) for v in s.scaleout[mask]}):
        values = s.throughput[mask & (s.scaleout == p)]
        out[p] = {"throughput": float(np.median(values)), "seconds": int(values.size),
                  "p25": float(np.percentile(values, 25)), "p75": float(np.percentile(values, 75))}
    return out


def record_cost(s: Sampled, warmup_s: float = 10.0, **kw: float) -> dict[int, dict[str, float | None]]:
    """Per parallelism: the busy milliseconds a record costs a worker, below saturation and saturated (the medians
    over seconds of Σ busy share / Σ throughput of the workers reporting both), and the seconds of each. Where the
    two differ, records per busy second read below saturation misjudge the capacity by their ratio; `kw` are
    `saturated`'s thresholds."""
    sat = saturated(s, warmup_s=warmup_s, **kw)
    pairs = [(t, b) for t, b, _ in s.workers.values()]
    with np.errstate(invalid="ignore", divide="ignore"):
        both = [np.isfinite(t) & np.isfinite(b) for t, b in pairs]
        busy = np.sum([np.where(ok, b, 0.0) for (_, b), ok in zip(pairs, both, strict=True)], axis=0)
        thr = np.sum([np.where(ok, t, 0.0) for (t, _), ok in zip(pairs, both, strict=True)], axis=0)
        cost = np.where(thr > 0, 1000.0 * busy / thr, np.nan) if pairs else np.full(s.ts.size, np.nan)
        steady = (s.uptime >= warmup_s) & np.isfinite(cost) & np.isfinite(s.scaleout)
    out: dict[int, dict[str, float | None]] = {}
    for p in sorted({int(v) for v in s.scaleout[steady]}):
        at = steady & (s.scaleout == p)
        below, saturated_ = cost[at & ~sat], cost[at & sat]
        out[p] = {"below_saturation_ms": float(np.median(below)) if below.size else None,
                  "below_saturation_s": int(below.size),
                  "saturated_ms": float(np.median(saturated_)) if saturated_.size else None,
                  "saturated_s": int(saturated_.size)}
    return out


def finite_mean(a: np.ndarray) -> float | None:
    a = a[np.isfinite(a)]
    return float(a.mean()) if a.size else None


def measure(url: str, job: str, topic: str, start: float, end: float) -> dict[str, Any]:
    s = sample(url, job, topic, start, end)
    workers = {w: {"throughput": finite_mean(t), "busy": finite_mean(b), "cpu_load": finite_mean(c)} for w, (t, b, c) in
               s.workers.items() if finite_mean(t) is not None}
    cores_q = QuerySet(job, "flink", {"job_name": flink_label(job)}, {"topic": topic}, {"cpu": CORES}, 4.0, 2.0,
                       worker_label=WORKER_LABEL).query("cpu")
    cores = range_query(url, cores_q, start, end)
    for w, points in cores.items():
        if w in workers:
            workers[w]["cores"] = finite_mean(np.array(list(points.values())))
    return {"throughput": finite_mean(s.throughput), "throughput_median": float(np.nanmedian(s.throughput)),
            "loadavg_1m": round(os.getloadavg()[0], 2),  # the machine is shared: how busy it was
            "lag_start": float(s.lag[np.isfinite(s.lag)][0]) if np.isfinite(s.lag).any() else None,
            "lag_end": float(s.lag[np.isfinite(s.lag)][-1]) if np.isfinite(s.lag).any() else None,
            "busy": finite_mean(s.busy_min), "workers": workers}


def flood(flink: LocalFlink, exporter: TraceExporter, workdir: Path, name: str, parallelisms: Sequence[int],
          work_us: int, seconds: float = 45.0, skip_s: float = 15.0, log: Callable[[str], None] | None = None,
          bottleneck_us: int = 0) -> dict[int, dict[str, Any]]:
    """The saturation throughput at each parallelism now: a job far above any capacity (records pile up), rescaled
    through `flink-rest` and measured over the last `seconds - skip_s` at each parallelism. On a shared machine what
    a worker processes changes with its neighbours, so the demo measures it in the run itself."""
    topic = exporter.topic
    exporter.topic = f"{name}-events"  # another job's workload series must not see the flood
    total = int(len(parallelisms) * (seconds + 30) + 120)
    trace = Trace.of([int(3e6 / work_us)] * total, int(time.time() * 1000) + 2000)
    previous, exporter.trace = exporter.trace, trace
    spec = TraceJob(name, trace.write(workdir / f"{name}.txt"), trace.start_ms, workdir / f"{name}-out",
                    work_us=work_us, bottleneck_us=bottleneck_us)
    job_id = flink.submit(spec, parallelism=parallelisms[0])
    scaler = FlinkRestScaler(flink.rest_url, name, ready_timeout_s=120)
    found: dict[int, dict[str, Any]] = {}
    try:
        flink.wait_running(job_id, parallelisms[0])
        assert flink.prometheus_url is not None
        for p in parallelisms:
            asked = time.time()
            if scaler.current(name) != p:
                scaler.scale(name, p, f"{name}-{p}")
            started = time.time()
            time.sleep(seconds)
            m = measure(flink.prometheus_url, name, exporter.topic, started + skip_s, time.time())
            m["request_to_running_s"] = round(started - asked, 2)
            found[p] = m
            if log is not None:
                log(f"saturation at parallelism {p}: {m['throughput_median']:.0f} records/s "
                    f"(busy ≥ {fmt(m['busy'])})")
    finally:
        cancel(flink, job_id)
        exporter.topic, exporter.trace = topic, previous
    return found


def cancel(flink: LocalFlink, job_id: str) -> None:
    """End a measurement job whatever state it is in: a failed measurement must not leave it running."""
    with contextlib.suppress(Exception):
        flink.rest("PATCH", f"/jobs/{job_id}?mode=cancel")
        flink.wait_state(job_id, "CANCELED", 60)


def fmt(x: float | None) -> str:
    return "–" if x is None else f"{x:.2f}"
