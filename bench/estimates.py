"""`daedalus bench forecast` and `daedalus bench capacity`: the two models Daedalus plans with, scored alone.

Forecast: on each trace, the loop's forecaster (as Knowledge.new builds it) is fed one minute at a time and asked
for the next 15 minutes every minute, as the analyze phase does; each forecast is scored over its whole horizon
against what arrived. Two naive forecasts give the scale: last value (the last second, held flat) and
seasonal naive (the same 15 minutes one season earlier), where the trace has a known season. All three are
scored on the same forecast origins: from one hour into the trace (or one season, if longer) to its end.

Capacity: the simulator runs at a fixed scale-out under a sine workload between 10 % and 90 % of its true
capacity there (no saturation, as in the paper's sine runs), and the capacity model (Knowledge.new's) learns from
one observation per minute. Its estimate at that scale-out, and its extrapolation to every other one, are
compared with the simulator's true capacity, with the default partition skew and without skew.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from daedalus.bench.policies import Workload
from daedalus.models.config import LoopConfig
from daedalus.models.knowledge import Knowledge
from daedalus.sim.simulator import SimConfig, Simulator

HORIZON_S = 900
STEP_S = 60
WARMUP_S = 3600
START = SimConfig().start
# Periods known by construction (data/README.md): the paper's WordCount sine, two periods in 6 h.
KNOWN_SEASONS_S = {"sine_60000_6h": 10_800, "sine_100000_6h": 10_800}


def season_s(workload: Workload, length_s: int) -> int | None:
    """The trace's season in simulated seconds: a known period, or one day of a multi-day trace as compressed."""
    if workload.name in KNOWN_SEASONS_S:
        return KNOWN_SEASONS_S[workload.name]
    if workload.hours is None:
        return None
    dates = pd.to_datetime(pd.read_csv(workload.path).iloc[:, 0], format="mixed")
    span_s = (dates.max() - dates.min()).total_seconds()
    if span_s < 2 * 86_400:
        return None
    return round(length_s * 86_400 / span_s)


def forecast_trace(values: np.ndarray, season: int | None) -> dict[str, Any]:
    """WAPE of the loop's forecaster, last value and seasonal naive over 15-minute horizons on one trace."""
    values = np.asarray(values, dtype=float)
    forecaster = Knowledge.new("bench", LoopConfig()).forecaster
    first = max(WARMUP_S, season or 0)
    errors: dict[str, list[float]] = {"daedalus": [], "last_value": [], "seasonal_naive": []}
    actual_total = 0.0
    served: dict[str, int] = {}  # how often each method (or, chosen per lead, each mix such as arima+linear) served
    for end in range(STEP_S, len(values) - HORIZON_S + 1, STEP_S):
        chunk = slice(end - STEP_S, end)
        forecaster.observe(START + 1 + np.arange(chunk.start, chunk.stop), values[chunk])
        now = START + end
        f = forecaster.forecast(now)
        if end < first:
            continue
        actual = values[end: end + HORIZON_S]
        actual_total += float(np.abs(actual).sum())
        served[f.method] = served.get(f.method, 0) + 1
        model = np.asarray(f.values[:HORIZON_S], dtype=float) if f.values else np.full(HORIZON_S, values[end - 1])
        errors["daedalus"].append(float(np.abs(actual - model).sum()))
        errors["last_value"].append(float(np.abs(actual - values[end - 1]).sum()))
        if season is not None:
            before = values[end - season: end - season + HORIZON_S]
            errors["seasonal_naive"].append(float(np.abs(actual - before).sum()))
    result: dict[str, Any] = {
        "origins": len(errors["daedalus"]),
        "first_origin_s": first,
        "season_s": season,
        "served": served,
    }
    for method, errs in errors.items():
        result[f"wape_{method}"] = (sum(errs) / actual_total) if errs and actual_total > 0 else None
    return result


def run_forecast_bench(workloads: Sequence[Workload], traces: dict[str, np.ndarray],
                       on_done: Callable[[str], None] | None = None) -> dict[str, Any]:
    """`forecast_trace` on every workload (a trace too short for one scored origin is reported, not run)."""
    out: dict[str, Any] = {"horizon_s": HORIZON_S, "interval_s": STEP_S, "traces": {}}
    for w in workloads:
        values = traces[w.name]
        if len(values) < WARMUP_S + HORIZON_S + STEP_S:
            out["traces"][w.name] = {"error": f"too short: {len(values)} s, needs {WARMUP_S + HORIZON_S + STEP_S} s"}
        else:
            out["traces"][w.name] = forecast_trace(values, season_s(w, len(values)))
        if on_done:
            on_done(w.name)
    return out


def forecast_markdown(report: dict[str, Any]) -> str:
    lines = [
        "| trace | origins | season | Daedalus forecaster | last value | seasonal naive | served (times) |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, r in report["traces"].items():
        if "error" in r:
            lines.append(f"| {name} | – | – | {r['error']} | | | |")
            continue
        season = f"{r['season_s'] / 60:.0f} min" if r["season_s"] else "none"
        cells = [_pct(r[f"wape_{m}"]) for m in ("daedalus", "last_value", "seasonal_naive")]
        lines.append(f"| {name} | {r['origins']} | {season} | {' | '.join(cells)} "
                     f"| {', '.join(f'{m} {n}' for m, n in sorted(r['served'].items()))} |")
    return "\n".join(lines)


def _pct(value: float | None) -> str:
    return "–" if value is None or not math.isfinite(value) else f"{100 * value:.1f} %"


# --- capacity ----------------------------------------------------------------------------------------------


def capacity_at(scaleout: int, skew: float, seed: int, hours: float = 1.0, max_scaleout: int = 12) -> dict[str, Any]:
    """Run at a fixed scale-out under a sine from 10 % to 90 % of its true capacity; score the estimates."""
    config = SimConfig(max_scaleout=max_scaleout, skew=skew)
    probe = Simulator(np.zeros(1), config, seed=seed)
    true = probe.true_capacities()
    t = np.arange(round(hours * 3600), dtype=float)
    workload = true[scaleout - 1] * (0.5 + 0.4 * np.sin(2 * np.pi * t / 1800.0))
    sim = Simulator(workload, config, seed=seed, initial_scaleout=scaleout)
    model = Knowledge.new("bench", LoopConfig(max_scaleout=max_scaleout)).capacity
    since = sim.now
    for _ in range(len(workload) // STEP_S):
        sim.advance(STEP_S)
        model.update(sim.observe(since, sim.now))
        since = sim.now
    estimate = model.capacity_current()
    extrapolated, _ = model.capacities(max_scaleout, scaleout)
    others = [abs(extrapolated[j] - true[j]) / true[j] for j in range(max_scaleout) if j != scaleout - 1]
    return {
        "scaleout": scaleout,
        "skew": skew,
        "seed": seed,
        "true": float(true[scaleout - 1]),
        "estimate": float(estimate),
        "error_pct": 100.0 * (estimate - true[scaleout - 1]) / true[scaleout - 1],
        "extrapolation_abs_error_pct_median": 100.0 * float(np.median(others)) if others else None,
    }


def run_capacity_bench(seeds: Sequence[int] = (0, 1, 2), max_scaleout: int = 12, hours: float = 1.0,
                       skews: Sequence[float] | None = None,
                       on_done: Callable[[], None] | None = None) -> dict[str, Any]:
    """Every scale-out × skew (default and none) × seed; per scale-out, the error's mean and worst over seeds."""
    skews = (SimConfig().skew, 0.0) if skews is None else tuple(skews)
    runs = []
    for skew in skews:
        for n in range(1, max_scaleout + 1):
            for seed in seeds:
                runs.append(capacity_at(n, skew, seed, hours, max_scaleout))
                if on_done:
                    on_done()
    table: dict[str, list[dict[str, Any]]] = {}
    for skew in skews:
        rows = []
        for n in range(1, max_scaleout + 1):
            mine = [r for r in runs if r["skew"] == skew and r["scaleout"] == n]
            errors = np.array([r["error_pct"] for r in mine])
            extra = [r["extrapolation_abs_error_pct_median"] for r in mine
                     if r["extrapolation_abs_error_pct_median"] is not None]
            rows.append({
                "scaleout": n,
                "true_mean": float(np.mean([r["true"] for r in mine])),
                "error_pct_mean": float(errors.mean()),
                "abs_error_pct_max": float(np.abs(errors).max()),
                "extrapolation_abs_error_pct_median": float(np.median(extra)) if extra else None,
            })
        table[f"skew={skew:g}"] = rows
    all_abs = {key: [abs(r["error_pct"]) for r in runs if f"skew={r['skew']:g}" == key] for key in table}
    return {
        "settings": {"seeds": list(seeds), "max_scaleout": max_scaleout, "hours": hours, "skews": list(skews),
                     "workload": "sine from 10 % to 90 % of the true capacity at the scale-out, period 30 min"},
        "per_scaleout": table,
        "summary": {key: {"abs_error_pct_median": float(np.median(v)), "abs_error_pct_p95": float(np.percentile(v, 95)),
                          "abs_error_pct_max": float(np.max(v)),
                          "share_within_5_pct": float(np.mean(np.array(v) <= 5.0))}
                    for key, v in all_abs.items()},
        "runs": runs,
    }


def capacity_markdown(report: dict[str, Any]) -> str:
    """One table per skew setting: the estimate at each scale-out and the extrapolation to the others."""
    lines: list[str] = []
    for key, rows in report["per_scaleout"].items():
        lines += [f"**{key}**", "",
                  "| scale-out | true capacity | estimate error (mean) | worst abs error "
                  "| extrapolated (median abs error) |",
                  "|---|---|---|---|---|"]
        for r in rows:
            extra = r["extrapolation_abs_error_pct_median"]
            lines.append(f"| {r['scaleout']} | {r['true_mean']:,.0f} | {r['error_pct_mean']:+.1f} % "
                         f"| {r['abs_error_pct_max']:.1f} % | {'–' if extra is None else f'{extra:.1f} %'} |")
        lines.append("")
    return "\n".join(lines)
