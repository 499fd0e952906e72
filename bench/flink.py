"""Calibration of the simulator against a real Flink 2.3 on this machine, and the measurements the demo shares.

`calibrate()` starts a local session cluster (adaptive scheduler, four one-slot TaskManagers) and measures, on the
trace job (`daedalus.runtime.flink`):

1. the throughput at saturation at parallelism 1 … 4 (a trace far above any capacity: the job processes as fast
   as it can, its backlog grows), with each worker's busy share, JVM CPU load and CPU cores used;
2. busy share and JVM CPU load against throughput below saturation (25, 50 and 75 % of the saturation throughput
   at parallelism 1 and 2): which one extrapolates to the capacity the job really has;
3. the downtime of each rescale method from the JobManager's log: `PUT /jobs/:id/resource-requirements` (adaptive
   scheduler, session cluster) and reactive mode (an application cluster whose TaskManager processes come and go).

Everything is read back from a real Prometheus scraping the cluster, with the same PromQL as the loop.
"""

from __future__ import annotations

import contextlib
import math
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import requests

from daedalus.connectors.flink_rest import FlinkReactiveScaler, FlinkRestScaler
from daedalus.connectors.promql import FLINK_SOURCE_OUT, QuerySet
from daedalus.runtime.flink import LocalFlink, Trace, TraceExporter, TraceJob, outages

PrometheusFactory = Callable[[Path, Sequence[str], str], AbstractContextManager[str]]
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


def _mean(a: np.ndarray) -> float | None:
    a = a[np.isfinite(a)]
    return float(a.mean()) if a.size else None


def _measure(url: str, job: str, topic: str, start: float, end: float) -> dict[str, Any]:
    s = sample(url, job, topic, start, end)
    workers = {w: {"throughput": _mean(t), "busy": _mean(b), "cpu_load": _mean(c)} for w, (t, b, c) in
               s.workers.items() if _mean(t) is not None}
    cores_q = QuerySet(job, "flink", {"job_name": flink_label(job)}, {"topic": topic}, {"cpu": CORES}, 4.0, 2.0,
                       worker_label=WORKER_LABEL).query("cpu")
    cores = range_query(url, cores_q, start, end)
    for w, points in cores.items():
        if w in workers:
            workers[w]["cores"] = _mean(np.array(list(points.values())))
    return {"throughput": _mean(s.throughput), "throughput_median": float(np.nanmedian(s.throughput)),
            "loadavg_1m": round(os.getloadavg()[0], 2),  # the machine is shared: how busy it was
            "lag_start": float(s.lag[np.isfinite(s.lag)][0]) if np.isfinite(s.lag).any() else None,
            "lag_end": float(s.lag[np.isfinite(s.lag)][-1]) if np.isfinite(s.lag).any() else None,
            "busy": _mean(s.busy_min), "workers": workers}


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
            m = _measure(flink.prometheus_url, name, exporter.topic, started + skip_s, time.time())
            m["request_to_running_s"] = round(started - asked, 2)
            found[p] = m
            if log is not None:
                log(f"saturation at parallelism {p}: {m['throughput_median']:.0f} records/s "
                    f"(busy ≥ {_fmt(m['busy'])})")
    finally:
        _cancel(flink, job_id)
        exporter.topic, exporter.trace = topic, previous
    return found


def calibrate(workdir: Path | None = None, prometheus: PrometheusFactory | None = None,
              levels: Sequence[int] = (1, 2, 3, 4), work_us: int = 1000, measure_s: float = 40.0,
              settle_s: float = 15.0, reactive: bool = True, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Measure saturation, utilisation against throughput and rescale downtime; returns the figures."""
    if prometheus is None:
        from daedalus.runtime.prometheus import local_prometheus as prometheus
    with contextlib.ExitStack() as stack:
        if workdir is None:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="daedalus-flink-bench-")))
        results: dict[str, Any] = {"work_us": work_us, "levels": list(levels)}
        results["session"] = _session(workdir / "session", prometheus, levels, work_us, measure_s, settle_s, log)
        if reactive:
            results["reactive"] = _reactive(workdir / "reactive", prometheus, work_us, log)
        return results


def _session(workdir: Path, prometheus: PrometheusFactory, levels: Sequence[int], work_us: int, measure_s: float,
             settle_s: float, log: Callable[[str], None]) -> dict[str, Any]:
    topic = "calibration-events"
    exporter = TraceExporter(None, topic)
    out: dict[str, Any] = {"saturation": {}, "below": {}, "rescales": []}
    t0 = time.time()
    try:
        with LocalFlink(workdir, taskmanagers=max(levels), max_taskmanagers=max(levels), prometheus=prometheus,
                        extra_targets=[exporter.target]) as flink:
            out["start_s"] = round(time.time() - t0, 1)
            out["rss_bytes_idle"] = flink.rss_bytes()
            log(f"session cluster with {max(levels)} TaskManagers up in {out['start_s']} s "
                f"({out['rss_bytes_idle'] / 2**30:.2f} GiB resident)")
            assert flink.prometheus_url is not None
            url = flink.prometheus_url
            # 1. Saturation at each parallelism; the rescales between them are the resource-requirements downtimes.
            marks = time.time()
            sat = flood(flink, exporter, workdir, "calibration", levels, work_us, settle_s + measure_s, settle_s, log)
            out["rss_bytes_busy"] = flink.rss_bytes()
            for p, m in sat.items():
                m["throughput"] = m["throughput_median"]
                out["saturation"][p] = m
            # 2. Below saturation, at parallelism 1 and 2: utilisation against throughput.
            for p in [x for x in (1, 2) if x in out["saturation"]]:
                out["below"][p] = _below(flink, exporter, workdir, url, p, out["saturation"][p]["throughput"], work_us,
                                         measure_s, settle_s, log)
            log_file = flink.jobmanager.log_file() if flink.jobmanager else None
            found = [o for o in (outages(log_file) if log_file else []) if o.down >= marks]
            previous = levels[0]
            for p in levels[1:]:  # the flood's rescales, in order
                o = found.pop(0) if found else None
                out["rescales"].append({"from": previous, "to": p, "down_s": None if o is None else round(o.seconds, 2),
                                        "request_to_running_s": sat[p]["request_to_running_s"]})
                previous = p
    finally:
        exporter.close()
    out["wall_s"] = round(time.time() - t0, 1)
    return out


def _below(flink: LocalFlink, exporter: TraceExporter, workdir: Path, url: str, p: int, capacity: float,
           work_us: int, measure_s: float, settle_s: float, log: Callable[[str], None]) -> dict[str, Any]:
    """Three steps at 25, 50 and 75 % of the saturation throughput at parallelism `p`, measured after `settle_s`."""
    shares = (0.25, 0.5, 0.75)
    seconds = int(settle_s + measure_s)
    trace = Trace.of([int(capacity * share) for share in shares for _ in range(seconds)],
                     int(time.time() * 1000) + 8000)
    previous, exporter.trace = exporter.trace, trace
    name = f"below-{p}"
    spec = TraceJob(name, trace.write(workdir / f"{name}.txt"), trace.start_ms, workdir / f"out-{name}",
                    work_us=work_us)
    job_id = flink.submit(spec, parallelism=p)
    points = []
    try:
        flink.wait_running(job_id, p)
        for i, share in enumerate(shares):
            begin = trace.start_ms / 1000 + i * seconds + settle_s
            time.sleep(max(0.0, begin + measure_s + 2 - time.time()))
            m = _measure(url, name, exporter.topic, begin, begin + measure_s)
            m["share"] = share
            # Records per busy second (the through-origin capacity the model falls back to on a flat load).
            per_worker = [w["throughput"] / w["busy"] for w in m["workers"].values() if w.get("busy")]
            m["ratio_capacity"] = float(sum(per_worker)) if len(per_worker) == p else None
            points.append(m)
            load = max((w["cpu_load"] or 0.0) for w in m["workers"].values()) if m["workers"] else None
            log(f"parallelism {p} at {share:.0%} of saturation: {m['throughput']:.0f} records/s, busy "
                f"{_fmt(m['busy'])}, JVM CPU load {_fmt(load)}")
    finally:
        _cancel(flink, job_id)
        exporter.trace = previous
    return {"saturation": capacity, "points": points, **_extrapolate(points, capacity)}


def _cancel(flink: LocalFlink, job_id: str) -> None:
    """End a measurement job whatever state it is in: a failed measurement must not leave it running."""
    with contextlib.suppress(Exception):
        flink.rest("PATCH", f"/jobs/{job_id}?mode=cancel")
        flink.wait_state(job_id, "CANCELED", 60)


def _fmt(x: float | None) -> str:
    return "–" if x is None else f"{x:.2f}"


def _extrapolate(points: list[dict[str, Any]], capacity: float) -> dict[str, Any]:
    """Least squares of throughput on each utilisation signal, through the origin and with an intercept, read at
    utilisation 1: the capacity each signal would make the model believe, against the measured saturation."""
    out: dict[str, Any] = {}
    for signal in ("busy", "cpu_load"):
        xs, ys = [], []
        for m in points:
            for w in m["workers"].values():
                if w.get(signal) is not None and w.get("throughput") is not None:
                    xs.append(w[signal])
                    ys.append(w["throughput"])
        if len(xs) < 2:
            continue
        x, y = np.array(xs), np.array(ys)
        workers = len(points[0]["workers"]) or 1
        slope, intercept = np.polyfit(x, y, 1)
        at_one = workers * (slope + intercept)
        out[signal] = {"per_worker_at_1": float(slope + intercept), "capacity_at_1": float(at_one),
                       "error_pct": float(100 * (at_one - capacity) / capacity),
                       "r2": float(np.corrcoef(x, y)[0, 1] ** 2) if np.std(x) > 0 else None}
    return out


def _reactive(workdir: Path, prometheus: PrometheusFactory, work_us: int, log: Callable[[str], None]
              ) -> dict[str, Any]:
    """Reactive mode: the job's parallelism follows the TaskManager processes; downtime of 1→2→3→2→1."""
    job, topic = "calibration-reactive", "calibration-reactive-events"
    workdir.mkdir(parents=True, exist_ok=True)
    rate = int(0.3e6 / work_us)  # well below one worker's capacity: the rescales, not saturation, are measured
    trace = Trace.of([rate] * 3600, int(time.time() * 1000) + 20000)
    exporter = TraceExporter(trace, topic)
    spec = TraceJob(job, trace.write(workdir / "trace.txt"), trace.start_ms, workdir / "out", work_us=work_us)
    out: dict[str, Any] = {"rescales": []}
    t0 = time.time()
    try:
        with LocalFlink(workdir, mode="reactive", application=spec, taskmanagers=1, max_taskmanagers=3,
                        prometheus=prometheus, extra_targets=[exporter.target]) as flink:
            scaler = FlinkReactiveScaler(workdir, job, ready_timeout_s=180)
            job_id = None
            while job_id is None and time.time() - t0 < 180:
                job_id = flink.job_id(job)
                time.sleep(0.5)
            assert job_id is not None, "the application job did not start"
            flink.wait_running(job_id, 1)
            out["start_s"] = round(time.time() - t0, 1)
            for n, target in enumerate((2, 3, 2, 1)):
                time.sleep(15)
                asked = time.time()
                message = scaler.scale(job, target, f"reactive-{n}")
                out["rescales"].append({"at": asked, "to": target, "message": message,
                                        "request_to_running_s": round(time.time() - asked, 2)})
                log(f"reactive: → {target} TaskManagers, running after {out['rescales'][-1]['request_to_running_s']} s")
            log_file = flink.jobmanager.log_file() if flink.jobmanager else None
            found = outages(log_file) if log_file else []
            for r in out["rescales"]:
                o = next((o for o in found if o.down >= r["at"] - 1), None)
                if o is not None:
                    r.update({"down_s": round(o.seconds, 2), "request_to_cancel_s": round(o.down - r["at"], 2)})
    finally:
        exporter.close()
    out["wall_s"] = round(time.time() - t0, 1)
    return out


def summary_rows(results: dict[str, Any]) -> list[tuple[str, ...]]:
    """The calibration table: one row per measurement, as printed and as in docs/engines.md."""
    rows = []
    sat = results["session"]["saturation"]
    base = sat.get(1, {}).get("throughput") or math.nan
    for p, m in sorted(sat.items()):
        cores = [w.get("cores") for w in m["workers"].values() if w.get("cores") is not None]
        load = f", load {m['loadavg_1m']:.1f}" if m.get("loadavg_1m") is not None else ""
        rows.append((f"saturation at parallelism {p}", f"{m['throughput']:.0f} records/s",
                     f"{m['throughput'] / base:.2f}× parallelism 1 (linear: {p}×)",
                     (f"busy {_fmt(m['busy'])}, CPU cores {sum(cores):.2f}" if cores else f"busy {_fmt(m['busy'])}")
                     + load))
    for p, b in sorted(results["session"]["below"].items()):
        for signal in ("busy", "cpu_load"):
            if signal in b:
                e = b[signal]
                rows.append((f"{signal} → capacity at parallelism {p}", f"{e['capacity_at_1']:.0f} records/s",
                             f"{e['error_pct']:+.0f} % against saturation ({b['saturation']:.0f})",
                             f"R² {_fmt(e['r2'])}"))
        for m in b["points"]:
            if m.get("ratio_capacity") is not None:
                rows.append((f"records per busy second at {m['share']:.0%}, parallelism {p}",
                             f"{m['ratio_capacity']:.0f} records/s",
                             f"{100 * (m['ratio_capacity'] / b['saturation'] - 1):+.0f} % against saturation "
                             f"({b['saturation']:.0f})", ""))
    for method, key in (("resource-requirements", "session"), ("reactive", "reactive")):
        for r in results.get(key, {}).get("rescales", []):
            down = r.get("down_s")
            rows.append((f"{method} → {r['to']}", "–" if down is None else f"{down:.2f} s down (JobManager log)",
                         f"{r['request_to_running_s']:.1f} s request to running", ""))
    return rows


def median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None
