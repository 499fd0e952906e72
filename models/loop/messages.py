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
from daedalus.models.knowledge import Knowledge, Override
from daedalus.models.text import duration, utc
from daedalus.models.types import Decision, LedgerEntry, ScalingAction, kind_of

Kind = Literal["approve", "reject", "scale", "pause", "resume", "quarantine", "release", "recovered", "forecaster"]
KINDS: tuple[str, ...] = ("approve", "reject", "scale", "pause", "resume", "quarantine", "release", "recovered",
                          "forecaster")


# How long past a proposal's deadline the loop still waits before expiring it: an answer given before the deadline
# (dated at the command's start) takes a moment to land in the inbox, and the run that reads the inbox may already
# have begun. `daedalus approve|reject` refuses to post later than half of it past the deadline, so an answer it
# reports recorded is always seen by the loop before the loop may expire the proposal.
ANSWER_GRACE_S = 30.0


@dataclass(frozen=True)
class ControlMessage:
    """One instruction for a job's loop. `body` depends on the kind:

    approve: proposal, scaleout (optional override), operator, reason, wall · reject: proposal, operator, reason, wall ·
    scale: scaleout, reason, operator, wall · pause/resume (resume also lifts a manual scale's hold): operator,
    reason · quarantine: reason ·
    release: operator, reason (none when a later validation passed) ·
    recovered: decision, observed_recovery_s, downtime_s (optional) · forecaster: state (Forecaster.to_state())

    `wall` is when the operator answered or asked (the wall clock): the ledger dates the event then, not when the
    loop got to it, up to a minute later (without it, the loop's time). An answer dated before its proposal's
    deadline is honoured even when the run that applies it starts after the deadline.
    """

    id: str
    job: str
    kind: Kind
    time: float
    body: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown control message kind {self.kind!r}; known: {', '.join(KINDS)}")

    def answer_label(self) -> str:
        """An answer (approve, reject) as the ledger records it, who and why: `rejected by bob: peak ahead`,
        `approved by alice: peak at noon` (the scale-out approved is the entry's target). The approval page quotes it
        alike whether the loop has applied the answer yet or not."""
        verb = "rejected" if self.kind == "reject" else "approved"
        return f"{verb} by {self.body.get('operator', 'an operator')}: {self.body.get('reason') or ''}".rstrip(": ")

    def describe(self) -> str:
        """One line for people: `approve ads-1767225600 at scale-out 6 by alice`, not the body's dict."""
        b = self.body
        by = f" by {b['operator']}" if b.get("operator") else ""
        why = f": {b['reason']}" if b.get("reason") else ""
        if self.kind == "approve":
            at = f" at scale-out {b['scaleout']}" if b.get("scaleout") else ""
            return f"approve {b.get('proposal')}{at}{by}{why}"
        if self.kind == "reject":
            return f"reject {b.get('proposal')}{by}{why}"
        if self.kind == "scale":
            return f"scale to {b.get('scaleout')}{by}{why}"
        if self.kind == "recovered":
            return f"recovery of {b.get('decision')} observed: {b.get('observed_recovery_s')} s"
        if self.kind == "forecaster":
            return "a retrained forecaster to swap in"
        return f"{self.kind}{by}{why}"


@dataclass
class Applied:
    """What the loop must do after applying its inbox."""

    decision: Decision | None = None  # an approved or manual action to execute now
    manual: bool = False  # whether `decision` is a manual scale (which the loop then keeps, `hold`)
    notes: list[str] = field(default_factory=list)
    closed: list[tuple[str, str]] = field(default_factory=list)  # (proposal, outcome) no operator will answer now


def _supersede(k: Knowledge, out: Applied, by: str, now: float, wall_now: float) -> None:
    """A manual scale overtakes what an operator approved or has yet to answer: it is recorded, not left hanging."""
    earlier = out.decision
    if earlier is not None:
        entry = k.entry(earlier.id)
        if entry is not None and entry.state in ("approved", "decided"):
            k.move(entry, "superseded", wall_now, now, f"superseded by {by} before it was executed")
            out.notes.append(f"approved {earlier.id} superseded by {by}")
            # Its approval run closes as what became of it, not as approved.
            out.closed = [(pid, "superseded" if pid == earlier.id else what) for pid, what in out.closed]
    p = k.pending
    if p is not None:
        entry = k.entry(p.id)
        if entry is not None:
            k.move(entry, "superseded", wall_now, now, f"superseded by {by} while awaiting an operator")
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
    return Decision(id=msg.body.get("proposal") or msg.id, time=msg.time, kind=kind_of(current, target),
                    current=current, target=target, reasons=(reason,))


def apply_messages(k: Knowledge, messages: list[ControlMessage], cfg: LoopConfig, current: int, now: float,
                   wall_now: float | None = None) -> Applied:
    """Apply the inbox in order; `wall_now` (default `now`) judges approval timeouts, which are wall-clock."""
    out = Applied()
    wall_now = now if wall_now is None else wall_now
    for msg in sorted(messages, key=lambda m: m.time):
        b, who = msg.body, msg.body.get("operator", "an operator")
        asked = min(float(b.get("wall", wall_now)), wall_now)  # the operator's own time, never after the loop's
        if msg.kind in ("approve", "reject"):
            p = k.pending
            if p is None or p.id != b.get("proposal"):
                out.notes.append(f"{msg.kind} of {b.get('proposal')} ignored: no such pending proposal")
                continue
            entry, why = k.entry(p.id), str(b.get("reason") or "")
            if asked >= p.expires:  # judged by when it was given, not by when this run got to it
                out.notes.append(f"{msg.kind} of {p.id} by {who} ignored: given at {utc(asked)}, after it expired "
                                 f"at {utc(p.expires)}")
                continue
            if msg.kind == "reject":
                if entry is not None:
                    k.move(entry, "rejected", asked, now, msg.answer_label(), who, why)
                k.pending = None
                out.notes.append(f"proposal {p.id} rejected by {who}")
                out.closed.append((p.id, "rejected"))
                continue
            target = int(b.get("scaleout") or p.target)
            refusal = check_scaleout(cfg, target)
            if refusal:
                out.notes.append(f"approval of {p.id} refused: {refusal}")
                continue
            if entry is not None:
                entry.target = target
                k.move(entry, "approved", asked, now, msg.answer_label(), who, why)
            k.pending = None
            out.closed.append((p.id, "approved"))
            _end_hold(k, wall_now)  # the operator took the loop's plan: the loop decides again
            out.decision, out.manual = _operator_decision(
                k, msg, current, target, msg.answer_label()), False
            out.notes.append(f"proposal {p.id} approved by {who}: {current} → {target}")
        elif msg.kind == "scale":
            target = int(b["scaleout"])
            refusal = check_scaleout(cfg, target)
            if refusal:
                out.notes.append(f"manual scale refused: {refusal}")
                continue
            _supersede(k, out, f"a manual scale to {target} by {who}", now, asked)  # dated when it was asked
            out.decision, out.manual = _operator_decision(
                k, msg, current, target, f"manual scale by {who}: {b.get('reason') or 'no reason given'}"), True
            if out.decision.changes:
                k.record(_entry_of(out.decision, wall_now, who, asked))
            out.notes.append(f"manual scale by {who}: {current} → {target}")
        elif msg.kind in ("pause", "resume"):
            k.paused = msg.kind == "pause"
            out.notes.append(f"{'paused' if k.paused else 'resumed'} by {who}")
            if msg.kind == "resume" and k.override is not None:  # the way to hand a held job back to the loop
                out.notes.append(f"the hold of {k.override.operator}'s manual scale to {k.override.scaleout} lifted "
                                 f"by {who}: the loop plans again")
                _end_hold(k, asked)
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
                                 reasons=(why,), state="decided", history=[(now, why)], wall=wall_now, operator=who,
                                 events=[(wall_now, f"released by {who}")]))
            out.notes.append(why)
        elif msg.kind == "recovered":
            k.settle_recovery(str(b.get("decision")), b.get("observed_recovery_s"), b.get("downtime_s"), now)
            out.notes.append(f"recovery of {b.get('decision')} observed: {b.get('observed_recovery_s')} s")
        elif msg.kind == "forecaster":
            k.forecaster.swap_model(Forecaster.from_state(b["state"]))
            out.notes.append("forecaster swapped for a retrained model")
    return out


def _entry_of(d: Decision, wall_now: float, operator: str, asked: float) -> LedgerEntry:
    """The ledger entry of an operator's manual scale, recorded with who asked (and when) before execute applies it."""
    return LedgerEntry(id=d.id, time=d.time, current=d.current, target=d.target, kind=d.kind, reasons=d.reasons,
                       state="decided", wall=wall_now, operator=operator,
                       events=[(asked, f"manual scale by {operator}")])


# --- an operator's manual scale holds ------------------------------------------------------------


def start_hold(cfg: LoopConfig, k: Knowledge, applied: Applied, action: ScalingAction | None, now: float,
               wall_now: float) -> None:
    """After a manual scale was executed, the loop keeps it for `cfg.manual_hold` (none when 0)."""
    if not applied.manual or action is None or action.state != "executed" or cfg.manual_hold <= 0:
        return
    entry = k.entry(action.decision_id)
    who = (entry.operator if entry is not None else None) or "an operator"
    _end_hold(k, wall_now)  # a manual scale replaces the one held before it
    k.override = Override(action.decision_id, action.target, who, wall_now + cfg.manual_hold)
    if entry is not None:
        entry.held_until = k.override.until
        k.note(entry, now, f"held at {action.target} until {utc(k.override.until)}: the loop keeps a manual scale "
                           f"for {duration(cfg.manual_hold)} (manual_hold), then plans again")


def _end_hold(k: Knowledge, wall_now: float) -> None:
    """Lift the hold in force, if any, and date its end in its ledger entry (`hold ended` beside `held until`)."""
    o, k.override = k.override, None
    entry = None if o is None else k.entry(o.decision_id)
    if entry is not None:
        entry.hold_ended = wall_now


def hold(cfg: LoopConfig, k: Knowledge, d: Decision, now: float, wall_now: float) -> tuple[Decision, str | None]:
    """The plan's decision while an operator's manual scale holds: a hold (even when the plan wanted no change) that
    names the operator and its end, with the plan's choice, not taken, among its reasons. Once the hold is over it
    ends here, with a note (returned) and in the ledger."""
    o = k.override
    if o is None:
        return d, None
    if wall_now >= o.until:
        _end_hold(k, wall_now)
        entry = k.entry(o.decision_id)
        if entry is not None:
            k.note(entry, now, "the hold ended: the loop plans again")
        return d, f"the hold of {o.operator}'s manual scale to {o.scaleout} ended: the loop plans again"
    why = (f"held at {o.scaleout}: {o.operator} scaled by hand, so the loop takes no action of its own until "
           f"{utc(o.until)} (manual_hold {duration(cfg.manual_hold)})")
    # A hold whatever the plan wanted, its choice named as not taken: "no change" would hide that the loop is held.
    plan = f"the plan, not taken: {d.kind} {d.current} → {d.target}"
    return Decision(d.id, d.time, "hold", d.current, d.current, (why, plan, *d.reasons)), None
