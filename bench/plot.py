"""The benchmark's figure per workload, laid out like the paper's: the workload, workers over time per policy,
the latency CDF per policy, and resource usage bars against the lower bound."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from daedalus.bench.policies import CDF_QUANTILES, POLICIES


def _order(policies: set[str]) -> list[str]:
    return [p for p in POLICIES if p in policies] + sorted(policies - set(POLICIES))


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

    fig, axes = plt.subplots(2, 2, figsize=(13, 8), constrained_layout=True)
    (ax_w, ax_n), (ax_cdf, ax_bar) = axes
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

    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
