"""Prefect artifacts for the UI, with stable keys per job so each report keeps its history."""

from __future__ import annotations

import math
import re

from prefect.artifacts import create_markdown_artifact, create_table_artifact

from daedalus.models.types import Analysis, Decision, ScalingAction


def artifact_key(kind: str, job: str) -> str:
    """Keys allow lowercase letters, digits and dashes only."""
    return f"{kind}-{re.sub(r'[^a-z0-9-]+', '-', job.lower())}".strip("-")


def capacity_rows(a: Analysis) -> list[dict[str, object]]:
    return [
        {
            "scale-out": i,
            "capacity_per_s": round(c),
            "source": "observed" if obs else "estimated",
            "predicted_recovery_s": None if math.isinf(r) else round(r),
            "current": "◀" if i == a.scaleout else "",
        }
        for i, (c, obs, r) in enumerate(zip(a.capacities, a.observed, a.recovery_times, strict=True), start=1)
    ]


def decision_markdown(job: str, a: Analysis, d: Decision, action: ScalingAction | None, version: int | None
                      ) -> str:
    head = {"hold": "Hold", "no-change": "No change", "scale-out": "Scale out", "scale-in": "Scale in"}[d.kind]
    lines = [
        f"# {job}: {head} — {d.current} → {d.target}",
        "",
        f"- decision `{d.id}`; average workload {a.avg_workload:,.0f}/s; lag {a.lag:,.0f} tuples",
        f"- capacity now C_{a.scaleout} = {a.capacity(a.scaleout):,.0f}/s; forecast peak (15 min) "
        f"{a.forecast.peak:,.0f}/s by {a.forecast.method}",
    ]
    if d.predicted_recovery_s is not None:
        lines.append(f"- predicted recovery time {d.predicted_recovery_s:.0f} s")
    if action is not None:
        lines.append(f"- action: **{action.state}** {action.message}")
    if version is not None:
        lines.append(f"- knowledge version {version}")
    lines += ["", "## Reasons", *(f"1. {r}" for r in d.reasons or ("(none)",))]
    return "\n".join(lines)


def forecast_markdown(job: str, a: Analysis) -> str:
    w = a.forecast.previous_wape
    wape = "n/a (first forecast)" if w is None else f"{100 * w:.1f} %"
    return (f"# {job}: forecast\n\n- method: **{a.forecast.method}**\n- WAPE of the previous forecast: {wape}\n"
            f"- next 15 minutes: peak {a.forecast.peak:,.0f}/s\n")


def publish(job: str, a: Analysis, d: Decision, action: ScalingAction | None, version: int | None,
            news: bool) -> None:
    """The decision every loop; capacity and forecast only with news, which the caller's publish task judges."""
    create_markdown_artifact(key=artifact_key("decision", job), markdown=decision_markdown(job, a, d, action, version),
                             description=f"Decision of {job}: {d.kind} {d.current} → {d.target}")
    if news:
        create_table_artifact(key=artifact_key("capacity", job), table=capacity_rows(a),
                              description=f"Capacity per scale-out of {job}")
        create_markdown_artifact(key=artifact_key("forecast", job), markdown=forecast_markdown(job, a),
                                 description=f"Forecast of {job}")
