"""Approvals, manual actions and kill switches, without a Prefect server: what is refused, what is posted, and
what the loop then does with it (models/loop/messages.py applies the inbox)."""

from __future__ import annotations

import copy
import math
import time
from dataclasses import replace
from datetime import UTC, datetime

import numpy as np
import pytest

from daedalus.connectors.answers import (
    checked_answer,
    pending_proposal,
    post_answer,
    post_manual_scale,
    recorded_answer,
)
from daedalus.connectors.store import Store
from daedalus.connectors.switches import stop_reason
from daedalus.models.errors import Refused
from daedalus.models.knowledge import Knowledge
from daedalus.models.loop.iteration import PLAIN, iterate
from daedalus.models.loop.messages import ANSWER_GRACE_S, apply_messages
from daedalus.models.ports import Target
from daedalus.sim.job import SimulatedJob
from daedalus.sim.scenario import scenario
from daedalus.sim.simulator import Simulator
from daedalus.sim.workloads import sine_workload
from daedalus.tasks.approval import ApprovalRequest, answer_model, approval_form_markdown, approval_markdown
from tests.ops.conftest import T0, with_proposal


def _request(**over) -> ApprovalRequest:
    base = dict(job="ads", proposal="ads-1767225600", current=4, proposed=6, min_scaleout=2, max_scaleout=10,
                capacities=[100_000.0 * i for i in range(1, 11)], observed=[i == 4 for i in range(1, 11)],
                recovery_times=[None, None, 900.0, 300.0, 200.0, 150.0, 120.0, 110.0, 100.0, 95.0],
                avg_workload=380_000.0, lag=12_000.0, forecast_peak=530_000.0, forecast_method="arima",
                predicted_recovery_s=150.0, reasons=["C_4 = 400,000/s below the forecast peak 530,000/s"],
                created=T0, expires=T0 + 600)
    return ApprovalRequest(**{**base, **over})


def test_the_approval_page_shows_the_reasoning():
    md = approval_markdown(_request())
    assert "# ads: Scale out 4 → 6?" in md
    assert "| capacity (tuples/s) | 400,000 | 600,000 |" in md  # C_current and C_proposed
    assert "380,000 | 530,000" in md  # average workload and the forecast peak
    assert "| predicted recovery time | | 150 s |" in md
    assert "C_4 = 400,000/s below the forecast peak 530,000/s" in md  # why now
    assert "| 4 ← now | 400,000 | observed | 300 |" in md
    assert "| 6 ← proposed | 600,000 | estimated | 150 |" in md
    assert "| 1 | 100,000 | estimated | never |" in md
    assert "[2, 10]" in md and "expires at 2026-01-01 00:10:00 UTC" in md
    loads = [0.634 if i == 4 else 0.0 for i in range(1, 11)]  # a request with the loads its capacities were seen at
    md = approval_markdown(_request(observed_load=loads))
    assert "| 4 ← now | 400,000 | observed at 63 % load | 300 |" in md and "| 1 | 100,000 | estimated | never |" in md


def test_the_resume_form_shows_the_proposal_without_a_table_or_a_heading():
    # Issue 36: at 1,400 px the form's dialog drew the reasoning under a huge heading and the tables in a scroll box.
    md = approval_form_markdown(_request(forecast_horizon_s=1800.0))
    assert not [line for line in md.splitlines() if line.startswith(("#", "|", "- ", "1. "))]
    assert md.startswith("**ads: scale out 4 → 6?** Proposal `ads-1767225600` expires at 2026-01-01 00:10:00 UTC")
    assert "Capacity 400,000 tuples/s at 4, **600,000** at 6; workload 380,000, forecast peak 530,000 over the " \
           "next 30 min (arima); recovery at 6: 2 min 30 s." in md
    assert "**Why now:** **1.** C_4 = 400,000/s below the forecast peak 530,000/s" in md
    assert "**4: 400,000, observed, 5 min ← now**" in md and "**6: 600,000, 2 min 30 s ← proposed**" in md
    assert "1: 100,000, never · 2: 200,000, never" in md and "10: 1,000,000, 95 s" in md
    # The approval page (an artifact, the whole width) keeps its tables, with the reasons numbered in the text.
    assert "**1.** C_4 = 400,000/s" in approval_markdown(_request()) and "\n1. " not in approval_markdown(_request())


def test_the_answer_form_carries_the_jobs_limits():
    schema = answer_model(_request()).model_json_schema()
    p = schema["properties"]["scaleout"]
    assert (p["minimum"], p["maximum"], p["default"]) == (2, 10, 6)
    assert schema["properties"]["decision"]["enum"] == ["approve", "reject"]
    form = answer_model(_request())
    assert form(decision="approve", scaleout=10, operator="alice").scaleout == 10
    with pytest.raises(ValueError, match="less than or equal to 10"):
        form(decision="approve", scaleout=11, operator="alice")
    # No user to default to in Prefect's open-source UI: the operator names themself, or the form is refused.
    assert "operator" in schema["required"] and "default" not in schema["properties"]["operator"]
    with pytest.raises(ValueError, match="operator"):
        form(decision="approve", scaleout=10)


def test_out_of_limits_approval_is_refused_with_the_limits_and_posts_nothing(ads, store_url):
    k = with_proposal(ads, store_url, created=time.time())
    with pytest.raises(Refused, match=r"scale-out 11 is outside the job's limits \[2, 10\].*max 10"):
        post_answer(ads, k.pending.id, "approve", 11, "ops", "", store_url)
    assert Store(store_url).job("ads").pending() == []


def test_an_answer_given_in_time_that_reaches_the_store_late(ads, store_url):
    # Refused from the command line (it could not promise the loop sees it); posted from a late-resumed UI run.
    k = with_proposal(ads, store_url, created=time.time() - 600 - ANSWER_GRACE_S)  # the grace is over
    given = k.pending.expires - 5
    with pytest.raises(Refused, match="too late to record before the loop expires the proposal"):
        post_answer(ads, k.pending.id, "approve", None, "ops", "", store_url, given=given)
    assert Store(store_url).job("ads").pending() == []
    post_answer(ads, k.pending.id, "approve", None, "ops", "", store_url, given=given, late_ok=True)
    (_, msg), = Store(store_url).job("ads").pending()
    assert msg.body["wall"] == given


def test_expired_proposal_is_refused(ads, store_url):
    k = with_proposal(ads, store_url, created=T0)  # expired long ago on the wall clock
    with pytest.raises(Refused, match="expired at 2026-01-01 00:10:00 UTC"):
        post_answer(ads, k.pending.id, "approve", None, "ops", "", store_url)
    assert Store(store_url).job("ads").pending() == []


def test_answered_proposals_are_refused(ads, store_url):
    k = with_proposal(ads, store_url, created=time.time())
    pid = k.pending.id
    result = post_answer(ads, pid, "approve", 8, "alice", "", store_url)
    assert result["scaleout"] == 8
    # The answer waits in the inbox: a second one is refused.
    with pytest.raises(Refused, match=r"already answered \(approve by alice\)"):
        post_answer(ads, pid, "reject", None, "bob", "no", store_url)
    # The loop applies it; afterwards the ledger says what became of it.
    waiting = Store(store_url).job("ads").pending()
    applied = apply_messages(k, [m for _, m in waiting], ads.loop_config(), current=4, now=k.pending.created + 60)
    assert applied.decision is not None and (applied.decision.current, applied.decision.target) == (4, 8)
    Store(store_url).job("ads").ack([p for p, _ in waiting])
    Store(store_url).job(k.job).save(k)
    with pytest.raises(Refused, match="no longer pending: it was approved"):
        post_answer(ads, pid, "approve", None, "bob", "", store_url)
    with pytest.raises(Refused, match="has no proposal ads-1"):
        post_answer(ads, "ads-1", "approve", None, "bob", "", store_url)


def test_an_answer_recorded_outside_the_approval_run_is_found_in_the_inbox_then_in_the_ledger(ads, store_url):
    # Issue 36: the approval run that started after the deadline said "Expired" for an answer given in time.

    k = with_proposal(ads, store_url, created=time.time())
    pid = k.pending.id
    assert recorded_answer(store_url, "ads", pid) is None
    post_answer(ads, pid, "approve", 8, "alice", "peak at noon", store_url, given=k.pending.created + 30)
    outcome, what = recorded_answer(store_url, "ads", pid)
    assert outcome == "approved" and what.startswith(f"proposal {pid} approved by alice: peak at noon, given at ")
    waiting = Store(store_url).job("ads").pending()
    apply_messages(k, [m for _, m in waiting], ads.loop_config(), current=4, now=k.pending.created + 60)
    Store(store_url).job("ads").ack([p for p, _ in waiting])
    Store(store_url).job(k.job).save(k)
    assert recorded_answer(store_url, "ads", pid) == (
        "approved", f"proposal {pid} approved by alice: peak at noon (recorded in the job's ledger)")


def test_reject_posts_the_reason(ads, store_url):
    k = with_proposal(ads, store_url, created=time.time())
    post_answer(ads, k.pending.id, "reject", None, "carol", "peak is over", store_url)
    (_, msg), = Store(store_url).job("ads").pending()
    answered = msg.body.pop("wall")  # when carol answered: the ledger dates the rejection then
    assert k.pending.created <= answered <= time.time()
    assert (msg.kind, msg.body) == ("reject", {"proposal": k.pending.id, "operator": "carol", "reason": "peak is over"})
    msg.body["wall"] = answered
    apply_messages(k, [msg], ads.loop_config(), current=4, now=k.pending.created + 60)
    assert k.pending is None and k.entry(msg.body["proposal"]).state == "rejected"


def test_an_answer_reads_the_status_of_the_newest_knowledge_not_the_knowledge(monkeypatch, ads, store_url):
    # Issue 36: loading the knowledge (its forecaster unpickles statsmodels) took a second of an answer's three.
    from daedalus.connectors.store import JobStore

    k = with_proposal(ads, store_url, created=time.time(), target=7)
    p, newest = k.pending, Store(store_url).job("ads").versions()[-1]
    status = {"pending": {"id": p.id, "from": 4, "to": 7, "expires": p.expires}, "knowledge_version": newest}
    Store(store_url).job("ads").write_json("status.json", status)

    def unpickled(*args, **kwargs):
        raise AssertionError("the knowledge was loaded")

    with monkeypatch.context() as m:
        m.setattr(JobStore, "load", unpickled)
        assert pending_proposal(store_url, "ads", p.id) == (p.expires, 7)
    # A status older than the newest knowledge (a loop saved, then has yet to write its status): the knowledge.
    Store(store_url).job("ads").write_json("status.json", {**status, "knowledge_version": newest - 1,
                                                           "pending": {**status["pending"], "to": 9}})
    assert pending_proposal(store_url, "ads", p.id) == (p.expires, 7)


def test_check_answer_defaults_to_the_proposed_scaleout(ads, store_url):
    k = with_proposal(ads, store_url, created=time.time(), target=7)
    assert checked_answer(ads, k.pending.id, "approve", None, store_url) == (7, k.pending.expires)


def test_manual_scale_refusals_name_the_limits(ads, store_url):
    with pytest.raises(Refused, match=r"outside the job's limits \[2, 10\]"):
        post_manual_scale(ads, 1, "test", "ops", store_url)
    with pytest.raises(Refused, match="give a reason"):
        post_manual_scale(ads, 5, " ", "ops", store_url)
    assert Store(store_url).job("ads").pending() == []
    post_manual_scale(ads, 5, "load test at noon", "ops", store_url)
    (_, msg), = Store(store_url).job("ads").pending()
    assert (msg.kind, msg.body["scaleout"], msg.body["reason"]) == ("scale", 5, "load test at noon")


def test_kill_switch_and_blackout(ads, store_url):
    ten_thirty = datetime(2026, 1, 1, 10, 30, tzinfo=UTC).timestamp()
    evening = datetime(2026, 1, 1, 18, 0, tzinfo=UTC).timestamp()
    assert stop_reason(Store(store_url), ads, ten_thirty) == "blackout window 09:00–17:00 UTC"
    assert stop_reason(Store(store_url), ads, evening) is None
    assert Store(store_url).kill_switch() is None and not Store(store_url).clear_kill_switch()
    Store(store_url).set_kill_switch("dave", "incident 42")
    assert Store(store_url).kill_switch()["operator"] == "dave"
    reason = stop_reason(Store(store_url), ads, evening)
    assert reason.startswith("kill switch for all jobs is on (set by dave") and reason.endswith("incident 42)")
    assert Store(store_url).jobs() == []  # the flag is a file: no job folder appears
    assert Store(store_url).clear_kill_switch() and stop_reason(Store(store_url), ads, evening) is None


def _sim_target(seed: int = 0, hours: float = 1.0) -> tuple[Target, Simulator]:
    """The paper's scenario, planned by the paper's planner: these tests are about approvals, ledgers and
    dashboards, and need its first decision (a scale-in from 12 on the first loop)."""
    sim_config, cfg, workload = scenario(sine_workload(hours=hours), 12, 0.9, seed)
    cfg = replace(cfg, planner="daedalus-paper")
    sim = Simulator(workload, sim_config, seed=seed, job="sim")
    job = SimulatedJob(sim)
    return Target("sim", metrics=job, scaler=job, clock=job, config=cfg), sim


def test_a_stopped_loop_decides_and_reports_but_never_acts():
    target, sim = _sim_target()
    knowledge = Knowledge.new("sim", target.config)
    sim.advance(600)
    it = iterate(target, knowledge, PLAIN, stop="blackout window 09:00–17:00 UTC")
    assert it.decision.changes, "the scenario starts over-provisioned: the plan wants to scale in"
    assert it.action.state == "dry-run" and sim.scaleout == 12 and not sim.rescaling
    entry = knowledge.entry(it.decision.id)
    assert entry.state == "dry-run"
    assert entry.message.startswith("blackout window 09:00–17:00 UTC: not acting; dry run: would scale sim 12 → ")
    assert knowledge.last_action is None and knowledge.pending is None
    # An operator's action still applies.
    sim.advance(60)
    from daedalus.models.loop.messages import ControlMessage

    manual = ControlMessage("scale-1", "sim", "scale", sim.now, {"scaleout": 8, "reason": "r", "operator": "o"})
    it = iterate(target, knowledge, PLAIN, [manual], stop="blackout window 09:00–17:00 UTC")
    assert it.action.state == "executed" and sim.scaleout == 8


def test_approve_mode_proposes_once_and_holds_while_pending():
    target, sim = _sim_target()
    target.config = type(target.config)(**{**target.config.__dict__, "mode": "approve"})
    knowledge = Knowledge.new("sim", target.config)
    sim.advance(600)
    first = iterate(target, knowledge, PLAIN)
    assert first.action.state == "proposed" and knowledge.pending.id == first.decision.id
    sim.advance(60)
    second = iterate(target, knowledge, PLAIN)
    assert second.decision.kind == "hold" and second.action is None
    assert any("awaits an operator" in r for r in second.decision.reasons)
    assert sim.scaleout == 12
    assert math.isclose(knowledge.pending.expires - knowledge.pending.created, target.config.approval_timeout)
    assert np.isfinite(first.analysis.forecast.peak)


class _Wall:
    """A wall clock the test moves by hand, beside a simulated job whose clock runs 20× faster."""

    def __init__(self, now: float) -> None:
        self.t = now

    def now(self) -> float:
        return self.t


def _approve_target(wall: _Wall) -> tuple[Target, Simulator]:
    target, sim = _sim_target(hours=3.0)
    target.config = type(target.config)(**{**target.config.__dict__, "mode": "approve", "approval_timeout": 3600.0})
    target.wall = wall
    return target, sim


def test_an_approval_timeout_is_wall_clock_time_whatever_the_jobs_speed():
    # Issue 14 item 2: with speedup 20 a 1 h approval timeout expired after 3 wall minutes.
    wall = _Wall(T0)
    target, sim = _approve_target(wall)
    knowledge = Knowledge.new("sim", target.config)
    sim.advance(600)
    first = iterate(target, knowledge, PLAIN)
    assert first.action.state == "proposed" and knowledge.pending.expires == T0 + 3600
    assert "awaiting approval until 2026-01-01 01:00:00 UTC" in first.action.message  # for people, not an epoch
    entry = knowledge.entry(first.decision.id)  # the ledger shows people the wall clock, the job keeps its own
    assert (entry.wall, entry.shown_time) == (T0, T0) and entry.time == first.decision.time != T0
    from daedalus.tasks.dashboards import ledger_rows

    assert ledger_rows(knowledge)[0]["time (UTC)"] == "2026-01-01 00:00"
    for _ in range(10):  # 10 wall minutes, 100 simulated minutes: past the timeout on the job's clock
        wall.t += 60
        sim.advance(600)
        it = iterate(target, knowledge, PLAIN)
        assert knowledge.pending is not None and not it.closed
    wall.t = T0 + 3600  # the deadline: the loop still waits a moment for answers given before it
    sim.advance(60)
    assert not iterate(target, knowledge, PLAIN).closed and knowledge.pending is not None
    wall.t = T0 + 3600 + ANSWER_GRACE_S
    sim.advance(60)
    it = iterate(target, knowledge, PLAIN)
    assert it.closed == ((first.decision.id, "expired"),)
    assert knowledge.entry(first.decision.id).state == "expired"
    assert knowledge.entry(first.decision.id).events[-1] == (T0 + 3600, "expired")  # dated at its deadline
    assert "expired unanswered at 2026-01-01 01:00:00 UTC" in knowledge.entry(first.decision.id).history[-1][1]


def test_an_answer_given_before_the_deadline_is_applied_by_a_run_that_starts_after_it():
    # Issue 36: approved 2 min 23 s before its deadline, the run that applied it started 2 min after: lost.
    from daedalus.models.loop.messages import ControlMessage

    wall = _Wall(T0)
    target, sim = _approve_target(wall)
    knowledge = Knowledge.new("sim", target.config)
    sim.advance(600)
    first = iterate(target, knowledge, PLAIN)
    p = knowledge.pending
    given = p.expires - 1  # one second before the deadline
    late, too_late = (ControlMessage(f"approve-{i}", "sim", "approve", sim.now,
                                     {"proposal": p.id, "operator": who, "reason": "peak at noon", "wall": at})
                      for i, (who, at) in enumerate((("oncall", given), ("bob", p.expires))))
    wall.t = p.expires + 180  # the worker was busy: the run starts three minutes past the deadline
    sim.advance(60)
    ignored = copy.deepcopy(knowledge)
    it = iterate(target, ignored, PLAIN, [too_late])  # given at the deadline: too late, and it says so
    assert it.closed == ((p.id, "expired"),) and ignored.entry(p.id).events[-1] == (p.expires, "expired")
    assert any("ignored: given at 2026-01-01 01:00:00 UTC, after it expired" in n for n in it.notes)
    it = iterate(target, knowledge, PLAIN, [late])
    entry = knowledge.entry(first.decision.id)
    assert it.action is not None and it.action.decision_id == p.id and entry.state == "executed"
    assert (given, "approved by oncall: peak at noon") in entry.events  # who, why, and when it was given
    assert it.closed == ((p.id, "approved"),)


def test_a_manual_scale_supersedes_a_pending_proposal_and_an_approval_not_yet_executed():
    from daedalus.models.loop.messages import ControlMessage

    wall = _Wall(T0)
    target, sim = _approve_target(wall)
    knowledge = Knowledge.new("sim", target.config)
    sim.advance(600)
    first = iterate(target, knowledge, PLAIN)
    pid = first.decision.id
    sim.advance(60)
    wall.t = T0 + 60
    manual = ControlMessage("scale-1", "sim", "scale", sim.now, {"scaleout": 8, "reason": "r", "operator": "o",
                                                                 "wall": T0 + 40})
    it = iterate(target, knowledge, PLAIN, [manual])
    assert it.closed == ((pid, "superseded"),) and knowledge.pending is None
    assert knowledge.entry(pid).state == "superseded" and it.action.state == "executed" and sim.scaleout == 8
    assert knowledge.entry(pid).events[-1] == (T0 + 40, "superseded")  # when the manual scale was asked

    # An approval and a later manual scale in the same inbox: the approval never runs, and says why.
    k2 = Knowledge.new("sim", target.config)
    target2, sim2 = _approve_target(wall)
    sim2.advance(600)
    proposal = iterate(target2, k2, PLAIN).decision.id
    sim2.advance(60)
    approve = ControlMessage("approve-1", "sim", "approve", sim2.now - 1, {"proposal": proposal, "operator": "a"})
    scale = ControlMessage("scale-2", "sim", "scale", sim2.now, {"scaleout": 9, "reason": "r", "operator": "b"})
    it = iterate(target2, k2, PLAIN, [approve, scale])
    assert k2.entry(proposal).state == "superseded" and sim2.scaleout == 9
    assert any("superseded by a manual scale to 9 by b" in n for n in it.notes)
    assert it.closed == ((proposal, "superseded"),)  # its approval run closes as superseded, not approved
