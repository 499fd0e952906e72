"""`daedalus explain`: one block per rescale and one per breach of the SLO, from a run's own record.

Three records are read:

- a `simulate --json OUT` run: OUT (the scores) and the trace written beside it (`trace_path(OUT)`, from
  sim.report.trace): each rescale's decision with its reasons, the forecast, the capacity estimated and the true
  one, each breach (contiguous seconds over the SLO) with the decision before it, and the costliest stretches (the
  scale-outs held longest above the lower bound, in worker-seconds) with the loop halfway through each: why it
  did not scale in;
- a `backtest --json OUT` report: the same trace for each replayed policy;
- a live job's ledger (the knowledge store): each executed rescale with its reasons, predicted and observed recovery
  and verdict. A ledger holds no end-to-end latency, so no breach can be told from it, and the block says so.

The reasons of the model-predictive planner name the schedules it priced ("keep …", "cheapest: …, against …
waiting") and what set a scale-out ("scale-out set by …"); a block prints them under those headings.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from daedalus.models.errors import ConfigurationError
from daedalus.models.text import duration

PRICED = ("keep ", "cheapest", "hold: ")  # reasons that price schedules or say why the chosen one won
UNCERTAINTY = ("forecast over", "envelope:", "capacity spread", "capacity check", "scale-out set by",
               "rescale budget", "not waiting", "the load")


def trace_path(report: Path) -> Path:
    """Where `simulate --json OUT` writes the trace beside OUT: OUT's name with `.trace.json` for its suffix."""
    return report.with_name(f"{report.stem}.trace.json")


def _rate(value: float | None) -> str:
    return "unknown" if value is None else f"{value:,.0f}/s"


def _estimate(value: float | None) -> str:
    """A capacity estimate; 0 is the model's "nothing known": no worker measured since the last rescale (the
    planner then interpolates the scale-out's capacity between observed ones, models/planning/mpc.py)."""
    return "none yet (no worker measured since the rescale)" if value == 0 else _rate(value)


def _at(seconds: float) -> str:
    return f"{duration(seconds)} ({seconds:,.0f} s)"


def _reason_lines(reasons: Sequence[str]) -> list[str]:
    lines = []
    for r in reasons:
        if r.startswith(UNCERTAINTY):
            lines.append(f"  why:     {r}")
    for r in reasons:
        if r.startswith(PRICED):
            lines.append(f"  priced:  {r}")
    rest = [r for r in reasons if not r.startswith(UNCERTAINTY + PRICED)]
    lines += [f"  note:    {r}" for r in rest]
    return lines


def decision_block(n: int, d: Mapping[str, Any]) -> list[str]:
    """One rescale of a simulated or replayed run."""
    out = [f"rescale {n} at {_at(d['t'])}: {d['from']} → {d['to']} ({d['kind']})",
           f"  forecast peak {_rate(d.get('forecast_peak'))}; capacity estimated "
           f"{_estimate(d.get('capacity_estimate'))} at {d['from']} → "
           f"{_estimate(d.get('capacity_estimate_target'))} at {d['to']}; true "
           f"{_rate(d.get('true_capacity'))} → {_rate(d.get('true_capacity_target'))}"]
    if not d.get("reasons"):
        out.append("  (the policy gives no reasons)")
    return out + _reason_lines(d.get("reasons") or ())


def breach_block(n: int, b: Mapping[str, Any], decisions: Sequence[Mapping[str, Any]], slo_s: float) -> list[str]:
    """One breach: contiguous seconds over the SLO, and the last decision before it."""
    workers = ", ".join(str(w) for w in b["scaleout"])
    out = [f"SLO breach {n} at {_at(b['start'])} – {_at(b['end'])}: {b['seconds']} s over {slo_s:.0f} s, latency up to "
           f"{b['peak_latency_s']:.0f} s, at {workers} worker(s)",
           f"  workload peak {_rate(b['workload_peak'])} (from 2 min before) against a true capacity of "
           f"{_rate(b['true_capacity'])}"]
    return out + _loop_lines("last decision before it", b.get("decision_before"), decisions)


def _loop_lines(which: str, k: int | None, decisions: Sequence[Mapping[str, Any]]) -> list[str]:
    """The loop a block refers to (decision `k` of the trace, if any): decision, forecast, capacities, reasons."""
    if k is None:
        return []
    d = decisions[k]
    return [f"  {which}, at {_at(d['t'])}: {d['kind']} {d['from']} → {d['to']}; forecast peak "
            f"{_rate(d.get('forecast_peak'))}, capacity estimated {_estimate(d.get('capacity_estimate'))}, true "
            f"{_rate(d.get('true_capacity'))}", *_reason_lines(d.get("reasons") or ())]


def stretch_block(n: int, c: Mapping[str, Any], decisions: Sequence[Mapping[str, Any]]) -> list[str]:
    """One of the costliest stretches: a scale-out held against the lower bound, and the loop halfway through it."""
    low, high = c["lower_bound_min"], c["lower_bound_max"]
    need = str(low) if low == high else f"{low}–{high}"
    out = [f"costliest stretch {n} at {_at(c['start'])} – {_at(c['end'])}: {c['scaleout']} worker(s) where {need} "
           f"would do ({c['lower_bound_mean']:.1f} on average, the lower bound): "
           f"{c['worker_seconds_above_lower_bound']:,.0f} worker-s above it"]
    return out + _loop_lines("the loop halfway through", c.get("decision_middle"), decisions)


def trace_blocks(trace: Mapping[str, Any]) -> list[str]:
    """Every rescale, every breach and the costliest stretches of one run's trace, in time order, each a block of
    lines (a trace written before the stretches were recorded has none)."""
    decisions = trace["decisions"]
    events: list[tuple[float, list[str]]] = []
    rescales = [d for d in decisions if d["executed"]]
    for n, d in enumerate(rescales, start=1):
        events.append((d["t"], decision_block(n, d)))
    for n, b in enumerate(trace["breaches"], start=1):
        events.append((b["start"], breach_block(n, b, decisions, trace["slo_s"])))
    for n, c in enumerate(trace.get("costliest", ()), start=1):
        events.append((c["start"], stretch_block(n, c, decisions)))
    events.sort(key=lambda e: e[0])
    head = (f"{trace['policy']}: {len(rescales)} rescale(s), {len(trace['breaches'])} SLO breach(es) "
            f"({sum(b['seconds'] for b in trace['breaches'])} s over {trace['slo_s']:.0f} s) in "
            f"{duration(trace['duration_s'])}")
    return [head, "", *("\n".join(lines) + "\n" for _, lines in events)]


def explain_file(path: Path) -> list[str]:
    """The blocks of a `simulate --json` report (with its trace beside it) or of a `backtest --json` report."""
    report = _read_object(path)
    if "policies" in report and "actual" in report:  # a backtest
        out: list[str] = []
        for name, replay in report["policies"].items():
            if "trace" not in replay:
                out.append(f"{name}: no trace in this report (written before `explain` existed)")
                continue
            out += _blocks(path, replay["trace"])
        return out
    trace = trace_path(path)
    if not trace.is_file():
        raise FileNotFoundError(f"{path}: no trace beside it ({trace.name}); `daedalus simulate --json {path.name}` "
                                "writes one")
    return _blocks(trace, _read_object(trace))


def _read_object(path: Path) -> dict[str, Any]:
    """A JSON object from `path`, or an error naming the file (a report mistyped or cut short is common input)."""
    try:
        value = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ConfigurationError(f"{path}: not a JSON report ({exc})") from None
    if not isinstance(value, dict):
        raise ConfigurationError(f"{path}: not a report: a JSON object was expected, not {type(value).__name__}")
    return value


def _blocks(path: Path, trace: Any) -> list[str]:
    """`trace_blocks`, with a trace that lacks what `simulate` writes named by its file."""
    try:
        return trace_blocks(trace)
    except (KeyError, TypeError, AttributeError) as exc:
        raise ConfigurationError(f"{path}: not a trace written by `daedalus simulate` or `backtest` "
                                 f"({type(exc).__name__}: {exc})") from None


def ledger_blocks(job: str, entries: Iterable[Any]) -> list[str]:
    """One block per executed rescale of a live job's ledger (LedgerEntry records)."""
    from daedalus.models.text import utc

    rescales = [e for e in entries if e.state == "executed" and e.target != e.current]
    out = [f"{job}: {len(rescales)} executed rescale(s) in the ledger; SLO breaches: none can be told from a ledger "
           "(it holds no end-to-end latency)", ""]
    for n, e in enumerate(rescales, start=1):
        lines = [f"rescale {n} at {utc(e.time)}: {e.current} → {e.target} ({e.kind})"]
        recovery = [f"{what} {duration(s)}" for what, s in (("predicted", e.predicted_recovery_s),
                                                             ("observed", e.observed_recovery_s))
                    if s is not None and math.isfinite(s)]
        if recovery:
            lines.append("  recovery: " + ", ".join(recovery))
        if e.verdict:
            lines.append(f"  verdict: {e.verdict}")
        lines += _reason_lines(e.reasons)
        out.append("\n".join(lines) + "\n")
    return out
