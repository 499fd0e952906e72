"""Score a simulated run: the figures of `daedalus simulate --json` and the benchmark."""

from __future__ import annotations

from typing import Any

import numpy as np

from daedalus.models.config import RESCALE_WINDOW_S
from daedalus.sim.runner import RunResult

SLO_S = 60.0
COSTLIEST = 3  # the stretches between rescales that `daedalus explain` shows as a run's costliest above the lower bound


def _pct(values: np.ndarray | list[float], q: float) -> float | None:
    a = np.asarray(values, dtype=float)
    a = a[np.isfinite(a)]
    return float(np.percentile(a, q)) if a.size else None


def budget_exceeded(times: list[float], budget: int, window_s: float = RESCALE_WINDOW_S) -> int:
    """Rescales beyond the budget: each one that makes more than `budget` in the window ending at it."""
    t = np.sort(np.asarray(times, dtype=float))
    if t.size == 0:
        return 0
    in_window = np.arange(t.size) - np.searchsorted(t, t - window_s, side="right") + 1
    return int((in_window > budget).sum())


def score(result: RunResult, slo_s: float = SLO_S) -> dict[str, Any]:
    h = result.history
    duration = int(h.timestamps.size)
    latency = h.latency_s
    loop = np.array([ms for _, ms in result.loop_ms]) if result.loop_ms else np.array([])
    at = np.array([t for t, _ in result.loop_ms]) if result.loop_ms else np.array([])
    first = loop[at <= 3600] if loop.size else loop
    last = loop[at > at.max() - 3600] if loop.size else loop
    worker_seconds = float(h.scaleout.sum())
    static = float(result.max_scaleout * duration)
    lower = float(result.lower_bound[:duration].sum())
    return {
        "policy": result.policy,
        "duration_s": duration,
        "worker_seconds": worker_seconds,
        "static_worker_seconds": static,
        "lower_bound_worker_seconds": lower,
        "worker_seconds_pct_of_static": 100.0 * worker_seconds / static if static else None,
        "ratio_to_lower_bound": worker_seconds / lower if lower else None,
        "latency_s": {"p50": _pct(latency, 50), "p95": _pct(latency, 95), "p99": _pct(latency, 99),
                      "max": _pct(latency, 100)},
        "seconds_over_slo": int((np.nan_to_num(latency) > slo_s).sum()),
        "slo_s": slo_s,
        "rescales": result.rescales,
        "budget_exceeded": budget_exceeded(result.rescale_times, result.rescale_budget),
        "downtime_s": int(h.down.sum()),
        "capacity_error_pct": {"median": _pct(result.capacity_error_pct, 50),
                               "p95": _pct(result.capacity_error_pct, 95)},
        "forecast_wape": {"median": _pct(result.forecast_wape, 50)},
        "loop_ms": {"median": _pct(loop, 50), "p95": _pct(loop, 95),
                    "first_hour_median": _pct(first, 50), "last_hour_median": _pct(last, 50)},
    }


def breaches(latency: np.ndarray, slo_s: float) -> list[tuple[int, int]]:
    """Contiguous runs of seconds over the SLO, as (first second, last second), inclusive."""
    over = np.nan_to_num(np.asarray(latency, dtype=float)) > slo_s
    if not over.any():
        return []
    edges = np.diff(np.concatenate([[0], over.astype(int), [0]]))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1) - 1
    return [(int(a), int(b)) for a, b in zip(starts, ends, strict=True)]


def costliest(scaleout: np.ndarray, lower: np.ndarray, n: int = COSTLIEST) -> list[tuple[int, int, float]]:
    """The `n` stretches of one scale-out (from a rescale to the next) that paid the most worker-seconds above the
    lower bound, as (first second, last second, worker-seconds above it), costliest first; none that paid nothing.
    Where a run's cost went: a rescale's block says why it happened, this says why none happened."""
    s = np.asarray(scaleout, dtype=float)
    if s.size == 0:
        return []
    starts = np.concatenate([[0], np.flatnonzero(np.diff(s) != 0) + 1])
    ends = np.concatenate([starts[1:], [s.size]]) - 1
    above = np.add.reduceat(np.maximum(s - np.asarray(lower, dtype=float)[:s.size], 0.0), starts)
    order = np.argsort(-above, kind="stable")[:n]
    return [(int(starts[i]), int(ends[i]), float(above[i])) for i in order if above[i] > 0]


def _loop_before(steps: list[dict[str, Any]], second: float) -> int | None:
    before = [i for i, s in enumerate(steps) if s["t"] <= second]
    return before[-1] if before else None


def trace(result: RunResult, slo_s: float = SLO_S) -> dict[str, Any]:
    """What `daedalus explain` needs of a run, compact: every executed rescale's loop, the last loop before each
    breach of the SLO and the loop halfway through each of the costliest stretches (its decision, reasons, forecast
    and capacities, estimated and true), every breach (its seconds, the latency's peak, the scale-out, the workload's
    peak against the true capacity) and the costliest stretches (the scale-out against the lower bound)."""
    h = result.history
    spans = breaches(h.latency_s, slo_s)
    wanted = {i for i, s in enumerate(result.steps) if s["executed"]}
    stretches = []
    for first, last, above in costliest(h.scaleout, result.lower_bound):
        middle = _loop_before(result.steps, (first + last) / 2)
        if middle is not None:
            wanted.add(middle)
        lower = np.asarray(result.lower_bound[first:last + 1], dtype=float)
        stretches.append({"start": first, "end": last, "scaleout": int(h.scaleout[first]),
                          "worker_seconds_above_lower_bound": above, "lower_bound_min": int(lower.min()),
                          "lower_bound_max": int(lower.max()), "lower_bound_mean": float(lower.mean()),
                          "decision_middle": middle})
    out_breaches = []
    for first, last in spans:
        before = _loop_before(result.steps, first)
        if before is not None:
            wanted.add(before)
        scaleouts = h.scaleout[first:last + 1]
        top = int(scaleouts.max()) if scaleouts.size else 0
        out_breaches.append({
            "start": first, "end": last, "seconds": last - first + 1,
            "peak_latency_s": float(np.nanmax(h.latency_s[first:last + 1])),
            "scaleout": sorted({int(n) for n in scaleouts.tolist()}),
            "workload_peak": float(np.nanmax(h.workload[max(0, first - 120):last + 1])),
            "true_capacity": float(result.true_capacities[top - 1]) if top >= 1 else None,
            "decision_before": before,
        })
    index = {i: n for n, i in enumerate(sorted(wanted))}
    for b in out_breaches:
        b["decision_before"] = None if b["decision_before"] is None else index[b["decision_before"]]
    for c in stretches:
        c["decision_middle"] = None if c["decision_middle"] is None else index[c["decision_middle"]]
    return {"policy": result.policy, "slo_s": slo_s, "duration_s": int(h.timestamps.size),
            "decisions": [result.steps[i] for i in sorted(wanted)], "breaches": out_breaches,
            "costliest": stretches}
