"""Execute: apply a decision through the job's scaler, exactly once, and record it in the ledger."""

from __future__ import annotations

from daedalus.models.anomaly import RecoveryTracker
from daedalus.models.config import LoopConfig
from daedalus.models.errors import ConnectorError
from daedalus.models.knowledge import Knowledge, Proposal, RecoveryWatch
from daedalus.models.ports import Scaler
from daedalus.models.types import Decision, LedgerEntry, ScalingAction


def _entry(decision: Decision) -> LedgerEntry:
    return LedgerEntry(
        id=decision.id, time=decision.time, current=decision.current, target=decision.target,
        kind=decision.kind, reasons=decision.reasons, state="decided",
        predicted_recovery_s=decision.predicted_recovery_s,
    )


def apply(decision: Decision, knowledge: Knowledge, scaler: Scaler, now: float, *, dry_run: bool = False,
          note: str = "") -> ScalingAction:
    """Scale now (or validate, with dry_run); idempotent on the decision id."""
    entry = knowledge.entry(decision.id)
    if entry is not None and entry.state in ("executed", "dry-run"):
        return ScalingAction(decision.id, now, decision.current, decision.target, entry.state,
                             "already applied: not applying twice")
    if entry is None:
        entry = _entry(decision)
        knowledge.record(entry)
    try:
        message = scaler.scale(knowledge.job, decision.target, decision.id, dry_run=dry_run)
    except ConnectorError as exc:
        entry.state, entry.message = "failed", str(exc)
        entry.history.append((now, f"failed: {exc}"))
        return ScalingAction(decision.id, now, decision.current, decision.target, "failed", str(exc))
    entry.state = "dry-run" if dry_run else "executed"
    entry.message = f"{note}{message}"
    entry.history.append((now, entry.state))
    if not dry_run:
        knowledge.last_action = knowledge.last_rescale = now
        knowledge.watch = RecoveryWatch(
            decision_id=decision.id, rescale_time=now, scaled_out=decision.target > decision.current,
            predicted_recovery_s=decision.predicted_recovery_s, tracker=RecoveryTracker(now, knowledge.anomaly),
        )
    return ScalingAction(decision.id, now, decision.current, decision.target, entry.state, entry.message)


def propose(decision: Decision, knowledge: Knowledge, now: float, ttl_s: float) -> ScalingAction:
    """Approve mode: park the decision as a proposal for an operator."""
    entry = knowledge.entry(decision.id) or _entry(decision)
    if knowledge.entry(decision.id) is None:
        knowledge.record(entry)
    entry.state = "proposed"
    entry.history.append((now, "proposed"))
    knowledge.pending = Proposal(decision.id, now, now + ttl_s, decision.current, decision.target,
                                 decision.reasons)
    return ScalingAction(decision.id, now, decision.current, decision.target, "proposed",
                         f"awaiting approval until {now + ttl_s:.0f}")


def execute(cfg: LoopConfig, decision: Decision, knowledge: Knowledge, scaler: Scaler, now: float,
            operator: bool = False, stop: str | None = None) -> ScalingAction | None:
    """Act on the decision per the job's mode; an operator's own action (approved, manual) always acts.

    `stop` (kill switch for all jobs, blackout window): decide and report, never act; the ledger says why.
    """
    if not decision.changes:
        return None
    if operator:
        return apply(decision, knowledge, scaler, now)
    if stop is not None:
        return apply(decision, knowledge, scaler, now, dry_run=True, note=f"{stop}: not acting; ")
    if cfg.mode == "approve":
        return propose(decision, knowledge, now, cfg.approval_timeout)
    return apply(decision, knowledge, scaler, now, dry_run=cfg.mode == "dry-run")
