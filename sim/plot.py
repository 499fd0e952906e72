"""The demo's figure: workload against capacity, workers over time, latency."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from daedalus.sim.runner import RunResult


def save(fig: plt.Figure, path: Path, dpi: int) -> Path:
    """Write the figure, its folder made, and close it even when writing fails: pyplot keeps every open figure."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=dpi)
    finally:
        plt.close(fig)
    return path


def plot_run(result: RunResult, path: Path, slo_s: float = 60.0) -> Path:
    h = result.history
    hours = (h.timestamps - h.timestamps[0]) / 3600.0
    fig, (ax1, ax2, ax3) = plt.subplots(3, 1, figsize=(11, 8.5), sharex=True, constrained_layout=True)
    ax1.plot(hours, h.workload / 1000, lw=0.8, label="workload")
    ax1.plot(hours, h.throughput / 1000, lw=0.6, alpha=0.7, label="throughput")
    ax1.plot(hours, h.true_capacity / 1000, lw=1.0, ls="--", label="true capacity at current scale-out")
    ax1.set_ylabel("thousand tuples/s")
    ax1.legend(loc="upper right", fontsize=8)
    ax1.set_title(f"{result.policy}: workload and capacity")
    ax2.step(hours, h.scaleout, where="post", lw=1.2, label=result.policy)
    ax2.step(hours, result.lower_bound[: hours.size], where="post", lw=0.8, alpha=0.6, label="lower bound")
    ax2.axhline(result.max_scaleout, color="grey", lw=0.8, ls=":", label="static (maximum)")
    ax2.set_ylabel("workers")
    ax2.legend(loc="upper right", fontsize=8)
    ax3.plot(hours, h.latency_s, lw=0.8)
    ax3.axhline(slo_s, color="red", lw=0.8, ls="--", label=f"SLO {slo_s:.0f} s")
    ax3.set_yscale("symlog", linthresh=1.0)
    ax3.set_ylabel("end-to-end latency (s)")
    ax3.set_xlabel("hours")
    ax3.legend(loc="upper right", fontsize=8)
    return save(fig, path, dpi=110)
