"""The backtest's figure: worker-hours against p95 latency, one point per replayed policy and one for what ran."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from daedalus.sim.backtest import ACTUAL
from daedalus.sim.plot import save


def _figure(report: dict[str, Any]) -> plt.Figure:
    points = {ACTUAL: report["actual"], **report["policies"]}
    fig, ax = plt.subplots(figsize=(9, 5.2), constrained_layout=True)
    for name, p in points.items():
        latency = p["latency_p95_s"] if p["latency_p95_s"] is not None else float("nan")
        marker, size = ("*", 220) if name == ACTUAL else ("o", 70)
        ax.scatter(p["worker_hours"], latency, s=size, marker=marker, zorder=3,
                   color="black" if name == ACTUAL else None, label=name)
        ax.annotate(name, (p["worker_hours"], latency), textcoords="offset points", xytext=(6, 6), fontsize=9)
    ax.axhline(report["slo_s"], color="tab:red", ls="--", lw=0.8, label=f"SLO {report['slo_s']:g} s")
    ax.set_yscale("symlog", linthresh=1.0)
    ax.set_xlabel("worker-hours")
    ax.set_ylabel("p95 end-to-end latency, s")
    ax.set_title(f"{report['job']}: {report['window']['start']} – {report['window']['end']}", fontsize=10)
    ax.margins(x=0.1)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    return fig


def plot_backtest(report: dict[str, Any], path: Path) -> Path:
    """Write the Pareto plot of one job's backtest as a PNG."""
    return save(_figure(report), path, dpi=110)


def backtest_png(report: dict[str, Any]) -> bytes:
    """The same figure as PNG bytes, for a Markdown artifact."""
    fig = _figure(report)
    try:
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=110)  # 990 px: the UI's artifact column (~850 px) never blows it up
    finally:
        plt.close(fig)
    return buf.getvalue()
