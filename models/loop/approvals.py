"""Which `approve-scale` runs the server should hold, read from the ledger alone.

A loop run that dies after its save (a killed worker, a lease the server revoked) has recorded a proposal, or closed
one, without starting or ending its approval run. Every run therefore reconciles: the open proposal must have its
run, and a closed proposal whose run may still be waiting must see that run end as what became of it. Both are
idempotent, so a run that did its part already costs the next one a single read.
"""

from __future__ import annotations

from dataclasses import dataclass

from daedalus.models.knowledge import Knowledge
from daedalus.models.types import LedgerEntry

# An approval run waits for its answer until the proposal's deadline plus this margin (the server's own timeout,
# flows/approval.py); the loop runs every minute, so five of them notice the expiry and close the run before.
EXPIRY_MARGIN_S = 300
OUTCOMES = ("approved", "rejected", "expired", "superseded")


@dataclass(frozen=True)
class ApprovalRuns:
    """The approval runs a loop run reconciles."""

    open: str | None  # the proposal awaiting an operator: its run must exist
    closed: tuple[tuple[str, str], ...]  # (proposal, outcome): their runs, where still waiting, must end

    def __bool__(self) -> bool:
        return self.open is not None or bool(self.closed)


def answer(entry: LedgerEntry) -> str | None:
    """The operator's answer to a proposal as its ledger words it ("approved by alice: peak at noon"), or None."""
    return next((label for _, label in reversed(entry.events) if label.startswith(("approved", "rejected"))), None)


def outcome(entry: LedgerEntry) -> str | None:
    """What became of a proposal, as its newest outcome event says (an approval later superseded: superseded)."""
    words = [label.split(":", 1)[0].split(" ", 1)[0] for _, label in entry.events]
    if "proposed" not in words:
        return None
    return next((w for w in reversed(words) if w in OUTCOMES), None)


def approval_runs(knowledge: Knowledge, wall_now: float, approval_timeout_s: float) -> ApprovalRuns:
    """The open proposal, and the proposals closed whose approval run may still wait: proposed within the longest
    an approval run waits (the timeout, then the server's margin). Older runs have ended by the server's timeout."""
    since = wall_now - approval_timeout_s - EXPIRY_MARGIN_S
    closed = []
    for entry in knowledge.ledger:
        proposed = next((t for t, label in entry.events if label == "proposed"), None)
        if proposed is None or proposed < since or (knowledge.pending and knowledge.pending.id == entry.id):
            continue
        what = outcome(entry)
        if what is not None:
            closed.append((entry.id, what))
    return ApprovalRuns(None if knowledge.pending is None else knowledge.pending.id, tuple(closed))
