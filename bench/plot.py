"""The benchmark's figures. Per workload, laid out like the paper's: the workload, workers over time per policy,
the latency CDF per policy, resource usage bars against the lower bound, and the Pareto panel (worker-seconds
against p95 latency, one point per policy). For all workloads at once: the Pareto panels in one figure."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from daedalus.bench.catalog import CDF_QUANTILES, POLICIES
from daedalus.sim.plot import save

ORACLE = "oracle"  # the offline optimum: drawn as a star on every Pareto panel, the point no policy can pass


def _order(policies: set[str]) -> list[str]:
    return [p for p in POLICIES if p in policies] + sorted(policies - set(POLICIES))


def _marker(policy: str) -> str:
    return "*" if policy == ORACLE else "o"


def plot_workload(workload: str, runs: list[dict[str, Any]], table: dict[str, dict[str, Any]], path: Path,
                  slo_s: float = 60.0) -> Path:
    """`runs`: this workload's run results (sim.bench_policies.run_case); the series come from the lowest seed.

    `table`: the aggregated figures per policy (sim.bench_policies.aggregate) for the bars.
    """
    seed = min(r["seed"] for r in runs)
    first = {r["policy"]: r["series"] for r in runs if r["seed"] == seed}
    policies = _order(set(first))
    colors = {p: f"C{i}" for i, p in enumerate(policies)}
    any_series = next(iter(first.values()))
    minutes = np.arange(len(any_series["workload"]))
    hours = minutes / 60.0

    fig, axes = plt.subplots(2, 3, figsize=(18, 8), constrained_layout=True)
    (ax_w, ax_n, ax_pareto), (ax_cdf, ax_bar, ax_free) = axes
    ax_free.set_visible(False)
    fig.suptitle(f"{workload}: policies compared (seed {seed} for the series, mean of the seeds for the bars)")

    ax_w.plot(hours, np.asarray(any_series["workload"]) / 1000, color="black", lw=0.9, label="workload")
    ax_w.axhline(any_series["capacity_at_max"] / 1000, color="grey", ls=":", lw=0.8,
                 label="true capacity at the maximum scale-out")
    ax_w.set_ylabel("thousand tuples/s")
    ax_w.set_xlabel("hours")
    ax_w.set_title("workload (per-minute mean)")
    ax_w.legend(loc="upper right", fontsize=8)

    for p in policies:
        ax_n.step(hours, first[p]["workers"], where="post", lw=1.1, color=colors[p], label=p)
    ax_n.step(hours, any_series["lower_bound"], where="post", lw=0.8, ls="--", color="black", label="lower bound")
    ax_n.set_ylabel("workers")
    ax_n.set_xlabel("hours")
    ax_n.set_title("workers over time")
    ax_n.legend(loc="upper right", fontsize=8, ncol=2)

    for p in policies:
        q = first[p]["latency_quantiles"]
        if q:
            ax_cdf.plot(q, CDF_QUANTILES / 100, lw=1.2, color=colors[p], label=p)
    ax_cdf.axvline(slo_s, color="red", ls="--", lw=0.8, label=f"SLO {slo_s:g} s")
    ax_cdf.set_xscale("log")
    ax_cdf.set_xlim(left=0.3)
    ax_cdf.set_xlabel("end-to-end latency (s)")
    ax_cdf.set_ylabel("share of seconds")
    ax_cdf.set_title("latency CDF")
    ax_cdf.legend(loc="lower right", fontsize=8)

    bar_policies = _order(set(table))
    usage = [table[p]["worker_seconds_pct_of_static"] for p in bar_policies]
    bars = ax_bar.bar(bar_policies, usage, color=[colors.get(p, "grey") for p in bar_policies])
    ax_bar.bar_label(bars, fmt="%.0f %%", fontsize=8)
    lower = [table[p]["worker_seconds_pct_of_static"] / table[p]["ratio_to_lower_bound"]
             for p in bar_policies if table[p]["ratio_to_lower_bound"]]
    if lower:
        ax_bar.axhline(float(np.mean(lower)), color="black", ls="--", lw=0.8, label="lower bound")
        ax_bar.legend(loc="upper right", fontsize=8)
    ax_bar.set_ylabel("worker-seconds, % of static")
    ax_bar.set_title("resource usage")

    _pareto_axes(ax_pareto, "worker-seconds against p95 latency (lower left is better)", table, colors)
    ax_pareto.set_xlabel("worker-seconds, % of static (lower bound dashed)")
    ax_pareto.set_ylabel("p95 latency (s)")
    ax_pareto.legend(loc="upper right", fontsize=8)

    return save(fig, path, dpi=100)


def _pareto_axes(ax: Any, workload: str, table: dict[str, dict[str, Any]], colors: dict[str, str]) -> None:
    """One workload: worker-seconds (% of static) against p95 latency, one point per policy (mean of the seeds,
    bars over the seeds' range; the oracle a star), the lower bound as a dashed line; the points no other policy
    beats on both axes (the Pareto front) are joined."""
    points = {}
    for p in _order(set(table)):
        e = table[p]
        x, y = e["worker_seconds_pct_of_static"], e["latency_p95_s"]
        if x is None or y is None:
            continue
        points[p] = (x, y)
        xr, yr = e.get("worker_seconds_pct_of_static_range") or [x, x], e.get("latency_p95_s_range") or [y, y]
        ax.errorbar(x, y, xerr=[[x - xr[0]], [xr[1] - x]], yerr=[[y - yr[0]], [yr[1] - y]], fmt=_marker(p),
                    ms=11 if p == ORACLE else 6,
                    color=colors.get(p, "grey"), ecolor=colors.get(p, "grey"), elinewidth=0.8, capsize=2, label=p)
    front = sorted((xy for p, xy in points.items()
                    if not any(o != xy and o[0] <= xy[0] and o[1] <= xy[1] for o in points.values())))
    if len(front) > 1:
        ax.plot(*zip(*front, strict=True), color="black", lw=0.6, ls=":")
    ratios = [table[p]["worker_seconds_pct_of_static"] / table[p]["ratio_to_lower_bound"]
              for p in table if table[p].get("ratio_to_lower_bound")]
    if ratios:
        ax.axvline(float(np.mean(ratios)), color="black", ls="--", lw=0.8)
    ax.set_yscale("symlog", linthresh=1.0)
    ax.set_ylim(bottom=0.0)  # latency is never negative: no symlog ticks below 0
    ax.set_title(workload, fontsize=9)
    ax.tick_params(labelsize=7)


def plot_pareto(results: dict[str, dict[str, dict[str, Any]]], path: Path) -> Path:
    """Every workload's Pareto panel in one figure: x worker-seconds as % of static (the lower bound dashed),
    y p95 latency in seconds (log above 1 s); lower-left is better on both."""
    workloads = list(results)
    policies = _order({p for t in results.values() for p in t})
    colors = {p: f"C{i}" for i, p in enumerate(policies)}
    cols = min(4, max(1, len(workloads)))
    rows = (len(workloads) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 3.0 * rows), squeeze=False, constrained_layout=True)
    for ax, workload in zip(axes.flat, workloads, strict=False):
        _pareto_axes(ax, workload, results[workload], colors)
    for ax in list(axes.flat)[len(workloads):]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel("p95 latency (s)", fontsize=8)
    for ax in axes[-1, :]:
        ax.set_xlabel("worker-seconds, % of static", fontsize=8)
    handles = [plt.Line2D([], [], marker=_marker(p), ls="", color=colors[p], label=p) for p in policies]
    handles.append(plt.Line2D([], [], ls="--", color="black", label="lower bound"))
    fig.legend(handles=handles, loc="outside lower center", ncol=len(handles), fontsize=8)
    fig.suptitle("worker-seconds against p95 latency, one point per policy\n(mean of the seeds, bars: their range)",
                 fontsize=9)
    return save(fig, path, dpi=100)
