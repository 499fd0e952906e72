"""Execute: apply a decision through the job's scaler, exactly once, and record it in the ledger.

Exactly once across process deaths: before the target is touched, the intent (ledger state `executing`, and
the grace period counting from it) is written durably through the `journal` port; a run that dies after the
patch leaves that intent, and the next run reconciles it (`reconcile`) instead of deciding and patching again.
"""

from __future__ import annotations

from collections.abc import Callable

from daedalus.models.config import LoopConfig
from daedalus.models.errors import ConnectorError
from daedalus.models.knowledge import Knowledge, Proposal, RecoveryWatch
from daedalus.models.ports import Scaler
from daedalus.models.recovery import RecoveryTracker, superseded_note
from daedalus.models.text import utc
from daedalus.models.types import Decision, LedgerEntry, ScalingAction


def _entry(decision: Decision, wall_now: float | None) -> LedgerEntry:
    return LedgerEntry(
        id=decision.id, time=decision.time, current=decision.current, target=decision.target,
        kind=decision.kind, reasons=decision.reasons, state="decided",
        predicted_recovery_s=decision.predicted_recovery_s, wall=wall_now,
    )


Journal = Callable[[Knowledge], object]  # writes the knowledge durably (a new stored version)


def _rescaled(knowledge: Knowledge, entry: LedgerEntry, at: float) -> None:
    """What an executed rescale leaves in the knowledge: the grace period, and a recovery to follow. A rescale still
    followed (not recovered yet) is followed no longer, and its history says why, as the recovery monitor's does: what
    comes next is this rescale's recovery."""
    knowledge.last_action = knowledge.last_rescale = at
    followed = knowledge.watch
    older = knowledge.entry(followed.decision_id) if followed is not None else None
    if followed is not None and older is not None and older is not entry:
        knowledge.note(older, at, superseded_note(at - followed.rescale_time, entry.id))
    knowledge.watch = RecoveryWatch(
        decision_id=entry.id, rescale_time=at, scaled_out=entry.target > entry.current,
        predicted_recovery_s=entry.predicted_recovery_s, tracker=RecoveryTracker(at, knowledge.anomaly),
    )


def apply(decision: Decision, knowledge: Knowledge, scaler: Scaler, now: float, *, dry_run: bool = False,
          note: str = "", journal: Journal | None = None, wall_now: float | None = None) -> ScalingAction:
    """Scale now (or validate, with dry_run); idempotent on the decision id, write-ahead through `journal`.
    `wall_now` (default `now`) dates the ledger's events."""
    wall = now if wall_now is None else wall_now
    entry = knowledge.entry(decision.id)
    if entry is not None and entry.state in ("executed", "dry-run", "executing", "abandoned"):
        return ScalingAction(decision.id, now, decision.current, decision.target, entry.state,
                             "already applied: not applying twice")
    if entry is None:
        entry = _entry(decision, wall_now)
        knowledge.record(entry)
    previous_action = knowledge.last_action
    if not dry_run:
        knowledge.intend(entry, now, f"intent: {decision.current} → {decision.target}")
        knowledge.last_action = now  # a run that dies from here on still leaves the grace period
        if journal is not None:
            journal(knowledge)  # durable before the target is touched
    readable = not dry_run and _reported(scaler, knowledge.job) is not None
    try:
        message = scaler.scale(knowledge.job, decision.target, decision.id, dry_run=dry_run)
    except ConnectorError as exc:
        # A write whose answer was lost (a timeout, a 5xx, the API gone after it) may have taken effect: only the
        # target's own scale-out tells. Failed when it is there to read and not at the target, or was never readable.
        reached = _reported(scaler, knowledge.job) if readable else None
        if reached == decision.target:
            entry.message = (f"{note}the target reports {reached} although the scaler failed ({exc}): the write "
                             "took effect")
            knowledge.move(entry, "executed", wall, now, "executed (the target reports it)")
            _rescaled(knowledge, entry, now)
            return ScalingAction(decision.id, now, decision.current, decision.target, "executed", entry.message)
        if readable and reached is None:  # unknown: the intent stays, for the next run to settle (reconcile)
            entry.message = f"unsettled: {exc}; the target's scale-out is no longer readable: the next run settles it"
            knowledge.note(entry, now, entry.message)
            return ScalingAction(decision.id, now, decision.current, decision.target, "executing", entry.message)
        knowledge.last_action = previous_action  # refused: nothing changed, the loop may try again
        entry.message = str(exc)
        knowledge.move(entry, "failed", wall, now, f"failed: {exc}")
        return ScalingAction(decision.id, now, decision.current, decision.target, "failed", str(exc))
    state = "dry-run" if dry_run else "executed"
    knowledge.move(entry, state, wall, now, state)
    entry.message = f"{note}{message}"
    if not dry_run:
        _rescaled(knowledge, entry, now)
    return ScalingAction(decision.id, now, decision.current, decision.target, entry.state, entry.message)


def _reported(scaler: Scaler, job: str) -> int | None:
    """The scale-out the target reports, or None when it cannot be read."""
    try:
        return scaler.current(job)
    except ConnectorError:
        return None


def reconcile(knowledge: Knowledge, current: int | None, now: float, wall_now: float | None = None) -> list[str]:
    """Settle every intent a dead run left unfinished, from the scale-out the target reports now.

    Reached → `executed` (the rescale happened; its grace period and recovery count from the intent);
    not reached → `abandoned` (never redone blindly: the loop decides afresh, but not within the grace period
    of the intent, since the target may still be moving). Unknown (the target unreadable) → left for later.
    """
    notes = []
    for entry in knowledge.ledger:
        if entry.state != "executing" or current is None:
            continue
        if current == entry.target:
            knowledge.move(entry, "executed", now if wall_now is None else wall_now, now,
                           f"reconciled: the target is at {current}, the run that applied it died")
            _rescaled(knowledge, entry, entry.time)
        else:
            knowledge.move(entry, "abandoned", now if wall_now is None else wall_now, now,
                           f"abandoned: the run died; the target is at {current}, not {entry.target}")
            knowledge.last_action = max(knowledge.last_action or entry.time, entry.time)
        notes.append(f"unfinished action {entry.id} ({entry.current} → {entry.target}) {entry.state}: "
                     f"the target reports {current}")
    return notes


def propose(decision: Decision, knowledge: Knowledge, now: float, ttl_s: float, wall_now: float | None = None
            ) -> ScalingAction:
    """Approve mode: park the decision as a proposal for an operator, until `ttl_s` wall-clock seconds from now."""
    entry = knowledge.entry(decision.id) or _entry(decision, wall_now)
    if knowledge.entry(decision.id) is None:
        knowledge.record(entry)
    knowledge.move(entry, "proposed", now if wall_now is None else wall_now, now, "proposed")
    expires = (now if wall_now is None else wall_now) + ttl_s
    knowledge.pending = Proposal(decision.id, now, expires, decision.current, decision.target, decision.reasons)
    return ScalingAction(decision.id, now, decision.current, decision.target, "proposed",
                         f"awaiting approval until {utc(expires)}")


def execute(cfg: LoopConfig, decision: Decision, knowledge: Knowledge, scaler: Scaler, now: float,
            operator: bool = False, stop: str | None = None, journal: Journal | None = None,
            wall_now: float | None = None) -> ScalingAction | None:
    """Act on the decision per the job's mode; an operator's own action (approved, manual) always acts.

    `stop` (kill switch for all jobs, blackout window): decide and report, never act; the ledger says why.
    """
    if not decision.changes:
        return None
    if operator:
        return apply(decision, knowledge, scaler, now, journal=journal, wall_now=wall_now)
    if stop is not None:
        return apply(decision, knowledge, scaler, now, dry_run=True, note=f"{stop}: not acting; ", wall_now=wall_now)
    if cfg.mode == "approve":
        return propose(decision, knowledge, now, cfg.approval_timeout, wall_now)
    return apply(decision, knowledge, scaler, now, dry_run=cfg.mode == "dry-run", journal=journal,
                 wall_now=wall_now)
