"""Prefect artifacts for the UI, with stable keys per job so each report keeps its history.

Written for the operator reading them at 1,400 px: what to act on first (the decision, the recommended
scale-out), numbers with units and thousands separators, column names in words, and a description that says
what each artifact is.
"""

from __future__ import annotations

import re

from prefect.artifacts import create_markdown_artifact, create_table_artifact

from daedalus.models.text import capacity_source, duration, number, numbered, percent
from daedalus.models.types import Analysis, Decision, Forecast, ScalingAction

HEADS = {"hold": "Hold", "no-change": "No change", "scale-out": "Scale out", "scale-in": "Scale in"}


def artifact_key(kind: str, job: str) -> str:
    """Keys allow lowercase letters, digits and dashes only."""
    return f"{kind}-{re.sub(r'[^a-z0-9-]+', '-', job.lower())}".strip("-")


def horizon(f: Forecast) -> str:
    """The forecast's horizon as people read it (`30 min`): one name for it in every artifact, plot and reason."""
    return duration(len(f.values)) if f.values else "horizon (no forecast yet)"


def capacity_rows(a: Analysis, recommended: int | None = None) -> list[dict[str, object]]:
    """One row per scale-out, marked where the job is now and where the plan wants it."""
    rows = []
    loads = a.observed_load or (None,) * len(a.capacities)
    for i, (c, obs, r, load) in enumerate(zip(a.capacities, a.observed, a.recovery_times, loads, strict=True),
                                          start=1):
        marks = [m for m, on in (("now", i == a.scaleout), ("recommended", i == recommended)) if on]
        rows.append({
            "scale-out": i,
            "now / recommended": " and ".join(marks),
            "capacity (tuples/s)": number(c),
            "predicted recovery": duration(r),
            "capacity from": capacity_source(obs, load),
        })
    return rows


def decision_markdown(job: str, a: Analysis, d: Decision, action: ScalingAction | None, version: int | None,
                      verification: list[str] | None = None) -> str:
    lines = [
        f"# {job}: {HEADS[d.kind]} — {d.current} → {d.target}",
        "",
        f"- **recommended scale-out {d.target}** (now {d.current}); decision `{d.id}`",
    ]
    if action is not None:
        lines.append(f"- action: **{action.state}** {action.message}")
    lines += [
        f"- workload {number(a.avg_workload, 'tuples/s')} on average over the last loop; consumer lag "
        f"{number(a.lag, 'tuples')}",
        f"- capacity now: {number(a.capacity(a.scaleout), 'tuples/s')} at scale-out {a.scaleout}; forecast peak "
        f"of the next {horizon(a.forecast)} {number(a.forecast.peak, 'tuples/s')} ({a.forecast.method})",
    ]
    if d.predicted_recovery_s is not None:
        lines.append(f"- predicted recovery after the rescale: {duration(d.predicted_recovery_s)}")
    lines += [f"- {line}" for line in verification or ()]  # the bottleneck and the ceiling, where there are
    if version is not None:
        lines.append(f"- knowledge version {version}")
    lines += ["", "## Reasons", *numbered(d.reasons or ("(none)",))]
    return "\n".join(lines)


def forecast_markdown(job: str, a: Analysis) -> str:
    w = a.forecast.previous_wape
    wape = "n/a (first forecast)" if w is None else percent(w)
    return (f"# {job}: forecast\n\n- method: **{a.forecast.method}**\n- WAPE of the previous forecast: {wape}\n"
            f"- peak of the next {horizon(a.forecast)}: {number(a.forecast.peak, 'tuples/s')}\n")


def decision_artifacts(job: str, a: Analysis, d: Decision, action: ScalingAction | None, version: int | None,
            news: bool, verification: list[str] | None = None) -> None:
    """The decision every loop; capacity and forecast only with news, which the caller's publish task judges."""
    create_markdown_artifact(key=artifact_key("decision", job),
                             markdown=decision_markdown(job, a, d, action, version, verification),
                             description=f"{job}: the loop's last decision, {HEADS[d.kind].lower()} {d.current} → "
                                         f"{d.target}")
    if news:
        create_table_artifact(key=artifact_key("capacity", job), table=capacity_rows(a, d.target),
                              description=f"{job}: capacity (tuples/s) and recovery per scale-out")
        create_markdown_artifact(key=artifact_key("forecast", job), markdown=forecast_markdown(job, a),
                                 description=f"{job}: how the workload forecast is made")
