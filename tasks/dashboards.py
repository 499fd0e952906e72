"""Dashboards for the Prefect UI, rendered here from what the models computed: per-job artifacts with stable keys (so
the UI keeps their history), the job's status record and the fleet rows.

Each loop run publishes, in its one `publish` task (tasks/publish.py), the decision artifact of tasks/artifacts.py,
and with news (an action, or every `PLOT_EVERY`th loop) its capacity and forecast artifacts and:
- `ledger-<job>`: the scaling ledger, what became of each entry and who answered it, with predicted and observed
  recovery times (when the ledger changed), as markdown with a block per entry, whose lines wrap at the UI's width;
- `forecast-plot-<job>`: workload forecast against what actually arrived, with its WAPE (models/forecast/versus.py),
  as a PNG embedded in markdown (the UI renders markdown images; a data: URI needs no file server).
The publish task also writes the job's status and forecast record (through the job store, connectors/store.py). The
`fleet-overview` flow (flows/dashboards.py) gathers every job's status into one `fleet-overview` table.
"""

from __future__ import annotations

import base64
import io
import re
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import numpy as np

from daedalus.connectors.store import Store
from daedalus.models.forecast.versus import (
    FORECAST_STEP_S,
    actual_steps,
    matched_wape,
    next_loop_forecast,
    steps_of,
)
from daedalus.models.text import duration, number, percent, utc
from daedalus.tasks.artifacts import horizon

if TYPE_CHECKING:
    from daedalus.models.knowledge import Knowledge
    from daedalus.models.loop.iteration import Iteration
    from daedalus.models.types import Forecast, LedgerEntry

PLOT_EVERY = 5  # loops between forecast plots (and after every action)
# Wall-clock seconds between two loops' news at least. Deployed loops run 60 s apart, so it never binds there; a
# simulation running loops back to back (the demo: 360 in a few minutes) would otherwise render and store a
# 1,300 × 700 PNG every few seconds.
NEWS_EVERY_S = 30.0
STALE_AFTER_S = 180.0  # wall-clock seconds without a loop before a job counts as stale
# Characters of a health line in the fleet table's cell, whose text never wraps: at 1,400 px the UI gives a table
# about 850 px between its menu and its details panel, which a 31-character job name, the health, the scale-out, the
# mode and the decision must share (at 60 characters a 23-character name pushed the decision past the window's
# edge). The full text is in `daedalus status`.
SHORT_HEALTH = 40
LEDGER_REASON = 240  # the ledger is markdown, whose cells wrap: a reason is cut only where it runs on


def short(text: str, limit: int) -> str:
    """`text` cut to `limit` characters with an ellipsis: a table cell, not a paragraph that forces the table
    wider than the page."""
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


# --- status --------------------------------------------------------------------------------------


def health(it: Iteration, knowledge: Knowledge, stop: str | None) -> str:
    """One line: ok, or the first thing an operator should know."""
    if knowledge.paused:
        return "paused (kill switch for this job)"
    if knowledge.override is not None:
        o = knowledge.override
        return f"held at {o.scaleout} until {utc(o.until)}: manual scale by {o.operator}"
    if stop is not None:
        return f"not acting: {stop}"
    if knowledge.quarantine:
        return f"quarantined: {knowledge.quarantine}"
    if it.action is not None and it.action.state == "failed":
        return f"action failed: {it.action.message}"
    if it.analysis.holds:
        return f"holding: {it.analysis.holds[0]}"
    f = knowledge.forecaster
    if f.poor_loops:
        return f"forecast poor for {f.poor_loops} loop(s) (WAPE {percent(f.previous_wape or 0, digits=0)})"
    return "ok"


def _ledger_signature(knowledge: Knowledge) -> list[Any]:
    last = knowledge.ledger[-1] if knowledge.ledger else None
    return [] if last is None else [len(knowledge.ledger), last.id, last.state, len(last.history),
                                    last.observed_recovery_s]


def status_record(it: Iteration, knowledge: Knowledge, mode: str, stop: str | None, wall: float) -> dict[str, Any]:
    d, a, p, o = it.decision, it.analysis, knowledge.pending, knowledge.override
    # The entry whose newest event is the latest: an approval executes minutes after its entry was decided.
    acted = max((e for e in knowledge.ledger if e.state != "decided"), key=lambda e: e.changed, default=None)
    # After an executed action (the plan's or an operator's) the job is at its target now, not where it was.
    now_at = it.action.target if it.action is not None and it.action.state == "executed" else d.current
    recommended = now_at if now_at != d.current else d.target
    return {
        "job": knowledge.job, "time": d.time, "wall": wall, "mode": mode, "current": now_at,
        "recommended": recommended, "kind": d.kind, "reasons": list(d.reasons),
        "action": None if it.action is None else it.action.state,
        "last_action": None if acted is None else {"id": acted.id, "time": acted.changed, "from": acted.current,
                                                  "to": acted.target, "state": acted.state,
                                                  "operator": acted.operator, "events": events_text(acted)},
        "override": None if o is None else {"scaleout": o.scaleout, "operator": o.operator, "until": o.until,
                                            "decision": o.decision_id},
        "pending": None if p is None else {"id": p.id, "from": p.current, "to": p.target, "expires": p.expires},
        "paused": knowledge.paused, "stop": stop, "quarantine": knowledge.quarantine,
        "capacity": a.capacity(a.scaleout), "workload": a.avg_workload, "forecast_peak": a.forecast.peak,
        "forecast_method": a.forecast.method, "wape": a.forecast.previous_wape,
        "health": health(it, knowledge, stop), "ledger": _ledger_signature(knowledge), "loops": knowledge.loops,
        **verification_record(knowledge),
    }


# --- ledger --------------------------------------------------------------------------------------


def events_text(e: LedgerEntry) -> str:
    """What became of an entry, each event at its own time (UTC, to the second): `proposed 17:42:33 → approved by
    alice 17:43:30 → executed 17:43:30`, and a manual scale's hold: `… → held until 18:20:02 → hold ended 18:20:40`;
    the state alone for entries stored before events were kept."""
    if not e.events:
        return e.state
    parts = [f"{label} {utc(t, zone=False)[11:]}" for t, label in e.events]
    parts += [f"{label} {utc(t, zone=False)[11:]}" for t, label in ((e.held_until, "held until"),
                                                                     (e.hold_ended, "hold ended")) if t is not None]
    return " → ".join(parts)


def ledger_rows(knowledge: Knowledge, limit: int = 30, full_reasons: bool = False) -> list[dict[str, Any]]:
    """The newest ledger entries first: when the newest event happened, what became of each, predicted against
    observed recovery time, and the reason (cut to `LEDGER_REASON` characters unless `full_reasons`)."""
    rows = []
    for e in sorted(knowledge.ledger[-limit:], key=lambda e: e.changed, reverse=True):
        reason = e.reasons[-1] if e.reasons else ""  # the planner's conclusion, or the operator's word
        rows.append({
            "time (UTC)": utc(e.changed, zone=False, unknown="")[:16],  # to the minute; the events to the second
            "scale-out": f"{e.current} → {e.target}", "what happened": events_text(e),
            "predicted / observed recovery": f"{duration(e.predicted_recovery_s)} / "
                                             f"{duration(e.observed_recovery_s)}",
            "verdict": verdict_text(e),
            "reason": reason if full_reasons else short(reason, LEDGER_REASON), "decision": e.id,
        })
    return rows


def _plain(value: Any) -> str:
    """Text that markdown shows as written: a reason's `C_11 … C_12` must not turn into italics."""
    return re.sub(r"([\\`*_\[\]<>#|])", r"\\\1", str(value)).replace("\n", " ")


def ledger_markdown(job: str, rows: list[dict[str, Any]]) -> str:
    """The ledger as one short block per entry, newest first: the Prefect UI draws a markdown table's cells on one
    line each (a 1,400 px window then scrolls sideways past the reason), while a block's lines wrap, so every field
    reads whole at any width and with any job name."""
    lines = [f"# {job}: the scaling ledger, newest first", ""]
    for row in rows:
        lines += [f"**{row['time (UTC)']} UTC · {row['scale-out']}** · decision `{row['decision']}`", ""]
        lines += [f"- {key}: {_plain(value)}" for key, value in row.items()
                  if key not in ("time (UTC)", "scale-out", "decision") and value not in ("", None)]
        lines.append("")
    return "\n".join(lines if rows else [*lines, "(no entry yet)"]) + "\n"


def verdict_text(e: LedgerEntry) -> str:
    """`ineffective (22 % of the predicted capacity)`: what an executed rescale bought; "" until it is judged."""
    if e.verdict is None:
        return ""
    ratio = "" if e.capacity_ratio is None else f" ({percent(e.capacity_ratio, digits=0)} of the predicted capacity)"
    return f"{e.verdict}{ratio}"


def verification_lines(knowledge: Knowledge) -> list[str]:
    """The stage limiting the job and the ceiling in force, for the dashboards and `daedalus status JOB`."""
    lines = []
    if knowledge.bottleneck is not None:
        lines.append(f"bottleneck: {knowledge.bottleneck.describe()}")
    if knowledge.ceiling is not None:
        lines.append(knowledge.ceiling.describe())
    return lines


def verification_record(knowledge: Knowledge) -> dict[str, Any]:
    """status.json's part of rescale verification: the newest verdict, the bottleneck, the ceiling."""
    judged = next((e for e in reversed(knowledge.ledger) if e.verdict is not None), None)
    b, c = knowledge.bottleneck, knowledge.ceiling
    return {
        "verdict": None if judged is None else {"decision": judged.id, "from": judged.current, "to": judged.target,
                                                "verdict": judged.verdict, "capacity_ratio": judged.capacity_ratio},
        "bottleneck": None if b is None else {"stage": b.stage, "busy": b.busy, "scalable": b.scalable, "why": b.why},
        "ceiling": None if c is None else {"scaleout": c.scaleout, "until": c.until, "stage": c.stage,
                                           "reason": c.reason},
    }


# --- forecast against actual ---------------------------------------------------------------------


def forecast_png(job: str, knowledge: Knowledge, history: list[dict[str, Any]], latest: Forecast
                 ) -> tuple[bytes, float | None]:
    """The plot (PNG bytes) and the WAPE of the joined next-loop forecasts shown on it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    at, ay = actual_steps(knowledge.forecaster)
    ft, fy = next_loop_forecast(history)
    w = matched_wape(at, ay, ft, fy)

    def dt(ts: np.ndarray) -> list[datetime]:
        return [datetime.fromtimestamp(float(t), UTC) for t in ts]

    # 1,275 × 720 px, shown about 850 px wide in the UI at 1,400 px (sharp on a high-density screen), with fonts of
    # 15 px and more there.
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8.5, 4.8), dpi=150, height_ratios=[3, 1], sharex=False)
    try:
        if len(at):
            top.plot(dt(at), ay, color="black", lw=1.4, label="actual (30 s means)")
        if len(ft):
            top.plot(dt(ft), fy, color="tab:blue", lw=1, label="forecast for the next loop")
        if latest.values:
            lt = latest.start + FORECAST_STEP_S * np.arange(len(steps_of(latest.values)))
            top.plot(dt(lt), steps_of(latest.values), color="tab:orange", ls="--", lw=1.2,
                     label=f"the next {horizon(latest)} ({latest.method})")
        title = f"{job}: workload forecast against actual"
        top.set_title(title + ("" if w is None else f" — WAPE {percent(w)}"), fontsize=13)
        top.set_ylabel("tuples/s", fontsize=11)
        top.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda y, _: number(y, digits=0)))
        top.xaxis.set_major_formatter(matplotlib.dates.DateFormatter("%H:%M", tz=UTC))
        top.set_xlabel("time (UTC)", fontsize=11)
        if top.get_legend_handles_labels()[0]:  # nothing to show before the first loop's data
            top.legend(fontsize=10, loc="upper left")
        top.tick_params(labelsize=10)
        top.grid(alpha=0.3)
        hist = knowledge.forecaster.wape_history
        if hist:
            bottom.bar(range(len(hist)), [100 * h for h in hist], color="tab:gray", width=1.0)
            bottom.axhline(100 * knowledge.forecaster.wape_threshold, color="tab:red", lw=1.2, ls=":")
        bottom.set_ylabel("WAPE %", fontsize=11)
        bottom.set_xlabel("loops, oldest → newest (dotted: retraining threshold)", fontsize=11)
        bottom.tick_params(labelsize=10)
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format="png")
    finally:
        plt.close(fig)  # also when drawing failed: pyplot keeps every open figure
    return buf.getvalue(), w


def forecast_plot_markdown(job: str, png: bytes, w: float | None, latest: Forecast) -> str:
    wape_text = "n/a (nothing to compare yet)" if w is None else percent(w)
    prev = "n/a" if latest.previous_wape is None else percent(latest.previous_wape)
    return (f"# {job}: forecast against actual\n\n"
            f"- WAPE of the forecasts each loop relied on, over the plot: **{wape_text}**\n"
            f"- WAPE of the previous forecast (decides ARIMA or the linear fallback): {prev}\n"
            f"- method now: {latest.method}; peak of the next {horizon(latest)}: {number(latest.peak, 'tuples/s')}\n\n"
            f"![forecast against actual](data:image/png;base64,{base64.b64encode(png).decode()})\n")


# --- fleet ---------------------------------------------------------------------------------------


def last_action_text(last: dict[str, Any] | None) -> str:
    """`12 → 11 executed at 2026-11-26 17:43:30 (operator alice)`: the newest event's time, and who answered."""
    if not last:
        return ""
    who = f" (operator {last['operator']})" if last.get("operator") else ""
    return f"{last['from']} → {last['to']} {last['state']} at {utc(last['time'], zone=False, unknown='')}{who}"


def fleet_rows(jobs: list[tuple[str, str]], store: Store, wall_now: float,
               on_job: Any = None) -> list[dict[str, str]]:
    """One row per (job, mode in the jobs file): health and the scale-out (now → recommended) first, then the
    last decision and action, a pending proposal, and when the last loop ran."""
    rows = []
    for n, (job, mode) in enumerate(jobs, start=1):
        s = store.job(job).status()
        if s is None:
            rows.append({"job": job, "health": "no loop has run yet", "scale-out": "", "mode": mode, "decision": "",
                         "last action": "", "pending proposal": "", "last loop (UTC)": ""})
        else:
            last, pending = s.get("last_action"), s.get("pending")
            age = wall_now - float(s.get("wall") or 0)
            now, recommended = s.get("current"), s.get("recommended")
            rows.append({
                "job": job,
                "health": short(str(s.get("health")), SHORT_HEALTH) if age <= STALE_AFTER_S else
                f"stale: no loop for {duration(age)}",
                "scale-out": f"{now}" if recommended in (None, now) else f"{now} → {recommended}",
                "mode": s.get("mode", mode), "decision": s.get("kind") or "",
                "last action": last_action_text(last),
                "pending proposal": "" if not pending else f"{pending['id']} ({pending['from']} → {pending['to']})",
                "last loop (UTC)": utc(s.get("wall"), zone=False, unknown=""),
            })
        if on_job is not None:
            on_job(n, len(jobs))
    return rows
