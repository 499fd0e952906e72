"""Changes to a job's knowledge from outside its loop, applied by the loop itself.

Operators, background flows and the pipeline never write a job's knowledge directly: the loop might be
running and would overwrite them. They post a `ControlMessage` to the job's inbox; each iteration applies
the waiting messages first, under the deployment's concurrency limit of one. Applying is pure and returns
what the loop must do now (an approved or manual scale action) plus a line per message for the log.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from daedalus.models.config import LoopConfig
from daedalus.models.forecast import Forecaster
from daedalus.models.knowledge import Knowledge
from daedalus.models.text import utc
from daedalus.models.types import Decision, LedgerEntry

Kind = Literal["approve", "reject", "scale", "pause", "resume", "quarantine", "release", "recovered", "forecaster"]
KINDS: tuple[str, ...] = ("approve", "reject", "scale", "pause", "resume", "quarantine", "release", "recovered",
                          "forecaster")


@dataclass(frozen=True)
class ControlMessage:
    """One instruction for a job's loop. `body` depends on the kind:

    approve: proposal, scaleout (optional override), operator · reject: proposal, operator, reason ·
    scale: scaleout, reason, operator · pause/resume: operator, reason · quarantine: reason ·
    release: operator, reason (none when a later validation passed) ·
    recovered: decision, observed_recovery_s, downtime_s (optional) · forecaster: state (Forecaster.to_state())
    """

    id: str
    job: str
    kind: Kind
    time: float
    body: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown control message kind {self.kind!r}; known: {', '.join(KINDS)}")


@dataclass
class Applied:
    """What the loop must do after applying its inbox."""

    decision: Decision | None = None  # an approved or manual action to execute now
    notes: list[str] = field(default_factory=list)
    closed: list[tuple[str, str]] = field(default_factory=list)  # (proposal, outcome) no operator will answer now


def _supersede(k: Knowledge, out: Applied, by: str, now: float) -> None:
    """A manual scale overtakes what an operator approved or has yet to answer: it is recorded, not left hanging."""
    earlier = out.decision
    if earlier is not None:
        entry = k.entry(earlier.id)
        if entry is not None and entry.state == "approved":
            entry.state = "superseded"
            entry.history.append((now, f"superseded by {by} before it was executed"))
            out.notes.append(f"approved {earlier.id} superseded by {by}")
    p = k.pending
    if p is not None:
        entry = k.entry(p.id)
        if entry is not None:
            entry.state = "superseded"
            entry.history.append((now, f"superseded by {by} while awaiting an operator"))
        k.pending = None
        out.closed.append((p.id, "superseded"))
        out.notes.append(f"proposal {p.id} superseded by {by}")


def check_scaleout(cfg: LoopConfig, scaleout: int) -> str | None:
    """The refusal message when a requested scale-out lies outside the job's limits."""
    if not cfg.min_scaleout <= scaleout <= cfg.max_scaleout:
        return (f"scale-out {scaleout} is outside the job's limits "
                f"[{cfg.min_scaleout}, {cfg.max_scaleout}]")
    return None


def _operator_decision(k: Knowledge, msg: ControlMessage, current: int, target: int, reason: str) -> Decision:
    kind = "no-change" if target == current else ("scale-out" if target > current else "scale-in")
    return Decision(id=msg.body.get("proposal") or msg.id, time=msg.time, kind=kind, current=current,
                    target=target, reasons=(reason,))


def apply_messages(k: Knowledge, messages: list[ControlMessage], cfg: LoopConfig, current: int, now: float,
                   wall_now: float | None = None) -> Applied:
    """Apply the inbox in order; `wall_now` (default `now`) judges approval timeouts, which are wall-clock."""
    out = Applied()
    wall_now = now if wall_now is None else wall_now
    for msg in sorted(messages, key=lambda m: m.time):
        b, who = msg.body, msg.body.get("operator", "an operator")
        if msg.kind in ("approve", "reject"):
            p = k.pending
            if p is None or p.id != b.get("proposal"):
                out.notes.append(f"{msg.kind} of {b.get('proposal')} ignored: no such pending proposal")
                continue
            entry = k.entry(p.id)
            if msg.kind == "reject":
                if entry is not None:
                    entry.state = "rejected"
                    entry.history.append((now, f"rejected by {who}: {b.get('reason', '')}".rstrip(": ")))
                k.pending = None
                out.notes.append(f"proposal {p.id} rejected by {who}")
                continue
            if wall_now >= p.expires:
                out.notes.append(f"approval of {p.id} ignored: it expired at {utc(p.expires)}")
                continue
            target = int(b.get("scaleout") or p.target)
            refusal = check_scaleout(cfg, target)
            if refusal:
                out.notes.append(f"approval of {p.id} refused: {refusal}")
                continue
            if entry is not None:
                entry.state = "approved"
                entry.target = target
                entry.history.append((now, f"approved by {who} at {target}"))
            k.pending = None
            out.decision = _operator_decision(k, msg, current, target, f"approved by {who}")
            out.notes.append(f"proposal {p.id} approved by {who}: {current} → {target}")
        elif msg.kind == "scale":
            target = int(b["scaleout"])
            refusal = check_scaleout(cfg, target)
            if refusal:
                out.notes.append(f"manual scale refused: {refusal}")
                continue
            _supersede(k, out, f"a manual scale to {target} by {who}", now)
            out.decision = _operator_decision(k, msg, current, target,
                                              f"manual action by {who}: {b.get('reason', 'no reason given')}")
            out.notes.append(f"manual scale by {who}: {current} → {target}")
        elif msg.kind in ("pause", "resume"):
            k.paused = msg.kind == "pause"
            out.notes.append(f"{'paused' if k.paused else 'resumed'} by {who}")
        elif msg.kind == "quarantine":
            k.quarantine = str(b.get("reason", "metric validation failed"))
            out.notes.append(f"quarantined: {k.quarantine}")
        elif msg.kind == "release":
            k.quarantine = None
            if "operator" not in b:
                out.notes.append("released from quarantine: metric validation passed")
                continue
            why = f"released from quarantine by {who}: {b.get('reason') or 'no reason given'}"
            k.record(LedgerEntry(id=msg.id, time=now, current=current, target=current, kind="no-change",
                                 reasons=(why,), state="decided", history=[(now, why)], wall=wall_now))
            out.notes.append(why)
        elif msg.kind == "recovered":
            k.settle_recovery(str(b.get("decision")), b.get("observed_recovery_s"), b.get("downtime_s"), now)
            out.notes.append(f"recovery of {b.get('decision')} observed: {b.get('observed_recovery_s')} s")
        elif msg.kind == "forecaster":
            k.forecaster.swap_model(Forecaster.from_state(b["state"]))
            out.notes.append("forecaster swapped for a retrained model")
    return out
