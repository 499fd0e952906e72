"""Which approval runs a loop run reconciles, from the ledger alone (models/loop/approvals.py): hand-made ledgers."""

from __future__ import annotations

from daedalus.models.config import LoopConfig
from daedalus.models.knowledge import Knowledge, Proposal
from daedalus.models.loop.approvals import EXPIRY_MARGIN_S, ApprovalRuns, answer, approval_runs, outcome
from daedalus.models.types import LedgerEntry
from tests.helpers import T0

TIMEOUT = 600.0


def _entry(pid: str, events: list[tuple[float, str]]) -> LedgerEntry:
    return LedgerEntry(pid, events[0][0] if events else T0, 4, 6, "scale-out", ("why",), "decided", events=events)


def test_the_outcome_is_the_newest_answer_after_a_proposal():
    assert outcome(_entry("a", [(T0, "proposed"), (T0 + 5, "rejected by bob: peak ahead")])) == "rejected"
    # Approved, then a manual scale overtook it before it was executed: its run ends as superseded.
    assert outcome(_entry("b", [(T0, "proposed"), (T0 + 5, "approved by alice"), (T0 + 9, "superseded")])) \
        == "superseded"
    assert outcome(_entry("c", [(T0, "proposed"), (T0 + 5, "approved by alice: ok"), (T0 + 6, "intent: 4 → 6"),
                                (T0 + 8, "executed")])) == "approved"
    assert outcome(_entry("d", [(T0, "proposed")])) is None  # still waiting
    assert outcome(_entry("e", [(T0, "executed")])) is None  # auto mode: never proposed, no approval run
    # The operator's answer in the ledger's words, whatever followed it.
    assert answer(_entry("c", [(T0, "proposed"), (T0 + 5, "approved by alice: ok"), (T0 + 8, "executed")])) \
        == "approved by alice: ok"
    assert answer(_entry("f", [(T0, "proposed"), (T0 + 600, "expired")])) is None


def test_the_open_proposal_and_the_closed_ones_whose_runs_may_still_wait():
    k = Knowledge.new("ads", LoopConfig())
    longest = TIMEOUT + EXPIRY_MARGIN_S  # an approval run waits until its deadline, then the server's margin
    now = T0 + 10_000
    k.record(_entry("old", [(now - longest - 1, "proposed"), (now - longest + 500, "expired")]))
    k.record(_entry("auto", [(now - 30, "executed")]))
    k.record(_entry("expired", [(now - longest + 1, "proposed"), (now - 200, "expired")]))
    k.record(_entry("rejected", [(now - 120, "proposed"), (now - 60, "rejected by bob")]))
    k.record(_entry("open", [(now - 10, "proposed")]))
    k.pending = Proposal("open", now - 10, now + 590, 4, 6, ("why",))
    assert approval_runs(k, now, TIMEOUT) == ApprovalRuns("open", (("expired", "expired"), ("rejected", "rejected")))
    # Nothing to do in auto mode: no server call at all.
    auto = Knowledge.new("clicks", LoopConfig())
    auto.record(_entry("auto", [(now - 30, "executed")]))
    assert not approval_runs(auto, now, TIMEOUT)
