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
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import numpy as np

from daedalus.connectors.flink_rest import FlinkReactiveScaler
from daedalus.runtime.flink import LocalFlink, Trace, TraceExporter, TraceJob, outages
from daedalus.runtime.flink_sampling import (
    cancel,
    flood,
    fmt,
    measure,
)

PrometheusFactory = Callable[[Path, Sequence[str], str], AbstractContextManager[str]]


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
            m = measure(url, name, exporter.topic, begin, begin + measure_s)
            m["share"] = share
            # Records per busy second (the through-origin capacity the model falls back to on a flat load).
            per_worker = [w["throughput"] / w["busy"] for w in m["workers"].values() if w.get("busy")]
            m["ratio_capacity"] = float(sum(per_worker)) if len(per_worker) == p else None
            points.append(m)
            load = max((w["cpu_load"] or 0.0) for w in m["workers"].values()) if m["workers"] else None
            log(f"parallelism {p} at {share:.0%} of saturation: {m['throughput']:.0f} records/s, busy "
                f"{fmt(m['busy'])}, JVM CPU load {fmt(load)}")
    finally:
        cancel(flink, job_id)
        exporter.trace = previous
    return {"saturation": capacity, "points": points, **_extrapolate(points, capacity)}


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
                     (f"busy {fmt(m['busy'])}, CPU cores {sum(cores):.2f}" if cores else f"busy {fmt(m['busy'])}")
                     + load))
    for p, b in sorted(results["session"]["below"].items()):
        for signal in ("busy", "cpu_load"):
            if signal in b:
                e = b[signal]
                rows.append((f"{signal} → capacity at parallelism {p}", f"{e['capacity_at_1']:.0f} records/s",
                             f"{e['error_pct']:+.0f} % against saturation ({b['saturation']:.0f})",
                             f"R² {fmt(e['r2'])}"))
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
