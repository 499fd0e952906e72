"""Issue 25: what the ledger says of an operator's actions, and what a manual scale means to the loop.

Every entry names who answered it and each of its events at its own wall-clock time ("proposed → approved by alice
→ executed"); after a manual scale or an approval the loop reports a decision from the scale-out the operator set;
a manual scale holds for `manual_hold` (the job's clock) in every mode, then the loop plans again.
"""

from __future__ import annotations

from dataclasses import replace

from daedalus.models.knowledge import Knowledge
from daedalus.models.loop.iteration import PLAIN, iterate
from daedalus.models.loop.messages import ControlMessage
from daedalus.models.ports import Target
from daedalus.sim.job import SimulatedJob
from daedalus.sim.scenario import scenario
from daedalus.sim.simulator import Simulator
from daedalus.sim.workloads import sine_workload
from daedalus.tasks.dashboards import events_text, ledger_markdown, ledger_rows, status_record
from tests.ops.conftest import T0


class Wall:
    """The wall clock, moved by hand beside the simulated job's own clock."""

    def __init__(self, now: float) -> None:
        self.t = now

    def now(self) -> float:
        return self.t


def _target(mode: str, wall: Wall) -> tuple[Target, Simulator]:
    """The paper's scenario (12 workers at the start, over-provisioned: the plan wants to scale in)."""
    sim_config, cfg, workload = scenario(sine_workload(hours=3.0), 12, 0.9, 0)
    cfg = replace(cfg, planner="daedalus-paper", mode=mode, approval_timeout=3600.0)
    sim = Simulator(workload, sim_config, seed=0, job="sim")
    job = SimulatedJob(sim)
    return Target("sim", metrics=job, scaler=job, clock=job, config=cfg, wall=wall), sim


def test_an_approved_proposal_records_the_approver_and_each_events_own_time():
    wall = Wall(T0)
    target, sim = _target("approve", wall)
    k = Knowledge.new("sim", target.config)
    sim.advance(600)
    proposal = iterate(target, k, PLAIN).decision
    assert proposal.changes and k.pending is not None
    wall.t = T0 + 57  # alice answers 40 s after the proposal, the loop applies it at its next run
    sim.advance(60)
    approve = ControlMessage("a-1", "sim", "approve", sim.now, {"proposal": proposal.id, "operator": "alice",
                                                                "wall": T0 + 40})
    it = iterate(target, k, PLAIN, [approve])
    entry = k.entry(proposal.id)
    assert entry.state == "executed" and entry.operator == "alice"
    # Each event when it happened: the operator's hour found the approval dated when the loop applied it (81 s after
    # alice's command); an answer from the future (a skewed clock) is dated at the loop's time.
    assert entry.events == [(T0, "proposed"), (T0 + 40, "approved by alice"), (T0 + 57, "executed")]
    assert events_text(entry) == "proposed 00:00:00 → approved by alice 00:00:40 → executed 00:00:57"
    # The run reports the operator's decision, from the scale-out the job was at to the one it is at now.
    assert (it.decision.id, it.decision.current, it.decision.target) == (proposal.id, 12, proposal.target)
    assert it.decision.reasons == ("approved by alice",)
    record = status_record(it, k, "approve", None, wall.t)
    assert (record["current"], record["recommended"]) == (proposal.target, proposal.target)
    assert record["last_action"]["time"] == T0 + 57 and record["last_action"]["operator"] == "alice"
    (row, *_) = ledger_rows(k)
    assert row["time (UTC)"] == "2026-01-01 00:00" and row["what happened"] == events_text(entry)
    # The next run plans from where the operator's answer left the job.
    wall.t = T0 + 117
    sim.advance(60)
    after = iterate(target, k, PLAIN)
    assert after.decision.current == proposal.target and sim.scaleout == proposal.target


def test_a_rejection_and_an_expiry_are_dated_when_they_happened():
    wall = Wall(T0)
    target, sim = _target("approve", wall)
    k = Knowledge.new("sim", target.config)
    sim.advance(600)
    first = iterate(target, k, PLAIN).decision
    wall.t = T0 + 30
    sim.advance(60)
    iterate(target, k, PLAIN, [ControlMessage("r-1", "sim", "reject", sim.now,
                                              {"proposal": first.id, "operator": "bob", "reason": "peak ahead",
                                               "wall": T0 + 45})])  # a clock ahead of the loop's
    assert k.entry(first.id).events[-1] == (T0 + 30, "rejected by bob: peak ahead")  # who, why, when given
    assert k.entry(first.id).operator == "bob"
    second = k.pending  # the same run proposed again: the rejection freed the loop to
    assert second is not None and k.entry(second.id).events == [(T0 + 30, "proposed")]
    wall.t = second.expires + 240  # the loop notices the expiry four minutes late
    sim.advance(60)
    iterate(target, k, PLAIN)
    assert k.entry(second.id).events == [(T0 + 30, "proposed"), (second.expires, "expired")]  # at its deadline
    assert k.entry(second.id).changed == second.expires  # "last action" shows when it expired, not when seen


def test_a_manual_scale_holds_for_the_stated_time_then_the_loop_plans_again():
    wall = Wall(T0)
    target, sim = _target("auto", wall)
    target.config = replace(target.config, manual_hold=600.0)
    k = Knowledge.new("sim", target.config)
    sim.advance(600)
    iterate(target, k, PLAIN)
    sim.advance(900)
    wall.t += 60
    before = sim.scaleout
    # Far below what the workload needs: the plan will want to scale out again, and the hold keeps it from it.
    scale = ControlMessage("s-1", "sim", "scale", sim.now, {"scaleout": 4, "reason": "load test", "operator": "carol",
                                                            "wall": wall.t - 40})  # asked 40 s before the loop ran
    it = iterate(target, k, PLAIN, [scale])
    # The run reports what the operator did, not a plan made from the scale-out before it.
    assert (it.decision.kind, it.decision.current, it.decision.target) == ("scale-in", before, 4)
    assert it.decision.reasons == ("manual scale by carol: load test",) and sim.scaleout == 4
    entry = k.entry("s-1")
    assert entry.operator == "carol" and entry.events == [(T0 + 20, "manual scale by carol"), (T0 + 60, "executed")]
    assert k.override is not None and k.override.until == wall.t + 600  # wall-clock, as approval timeouts
    assert "held at 4 until 2026-01-01 00:11:00 UTC" in entry.history[-1][1]
    # The ledger says so (the operator's hour found it in the status alone): the hold with its promised end.
    assert events_text(entry) == "manual scale by carol 00:00:20 → executed 00:01:00 → held until 00:11:00"
    assert ledger_rows(k)[0]["what happened"] == events_text(entry)
    assert status_record(it, k, "auto", None, wall.t)["health"].startswith("held at 4 until")
    held = []
    while sim.now + 60 < it.action.time + 600:
        sim.advance(60)
        wall.t += 60
        held.append(iterate(target, k, PLAIN))
    assert sim.scaleout == 4 and all(h.action is None for h in held)
    assert all(h.decision.reasons[0] == "held at 4: carol scaled by hand, so the loop takes no action of its own "
                                        "until 2026-01-01 00:11:00 UTC (manual_hold 10 min)" for h in held)
    # Once the grace period is over, the plan wants more workers: reported, not taken.
    assert all(h.decision.kind == "hold" and h.decision.reasons[1].startswith("the plan, not taken: ") for h in held)
    wanted = [h.decision for h in held if h.decision.reasons[1].startswith("the plan, not taken: scale-out")]
    assert len(wanted) >= 3 and all(d.kind == "hold" and d.target == 4 and
                                    d.reasons[1] == "the plan, not taken: scale-out 4 → 12" for d in wanted)
    # Then the loop plans again from 4, and says so.
    sim.advance(60)
    wall.t += 60
    resumed = iterate(target, k, PLAIN)
    assert k.override is None and "the hold of carol's manual scale to 4 ended: the loop plans again" in resumed.notes
    assert resumed.decision.current == 4 and resumed.action is not None and resumed.action.state == "executed"
    # Carol's scale-in at the peak had not recovered (the job was held behind): the loop's rescale ends its watch.
    assert sim.scaleout > 4 and [what for _, what in entry.history[-2:]] == [
        "the hold ended: the loop plans again",
        f"superseded by the rescale 600 s after it ({resumed.decision.id}), before it recovered"]
    assert wall.t == T0 + 660 and events_text(entry) == ("manual scale by carol 00:00:20 → executed 00:01:00 → "
                                                         "held until 00:11:00 → hold ended 00:11:00")


def test_resume_hands_a_held_job_back_to_the_loop_at_once():
    # The operator's second hour: a manual scale-in at the peak left the job 880 million tuples behind, and nothing
    # but waiting out manual_hold (or redeploying with another) gave the job back to the loop.
    wall = Wall(T0)
    target, sim = _target("auto", wall)
    k = Knowledge.new("sim", target.config)
    sim.advance(600)
    iterate(target, k, PLAIN)
    sim.advance(900)
    wall.t += 60
    scale = ControlMessage("s-1", "sim", "scale", sim.now, {"scaleout": 4, "reason": "load test", "operator": "carol"})
    iterate(target, k, PLAIN, [scale])
    assert k.override is not None and sim.scaleout == 4
    sim.advance(240)
    wall.t += 240
    resume = ControlMessage("r-1", "sim", "resume", sim.now, {"operator": "dave", "wall": wall.t - 20})
    it = iterate(target, k, PLAIN, [resume])
    assert k.override is None
    assert "the hold of carol's manual scale to 4 lifted by dave: the loop plans again" in it.notes
    assert it.action is not None and it.action.state == "executed" and sim.scaleout > 4  # the plan, taken now
    assert events_text(k.entry("s-1")).endswith("→ held until 00:31:00 → hold ended 00:04:40")


def test_in_approve_mode_a_hold_proposes_nothing_until_it_ends():
    wall = Wall(T0)
    target, sim = _target("approve", wall)
    k = Knowledge.new("sim", target.config)
    sim.advance(600)
    scale = ControlMessage("s-1", "sim", "scale", sim.now, {"scaleout": 10, "reason": "r", "operator": "carol"})
    iterate(target, k, PLAIN, [scale])
    entry = k.entry("s-1")
    assert k.override is not None and entry.held_until == T0 + 1800 and entry.hold_ended is None
    while k.pending is None:  # the plan shows in the hold's reasons; no operator is asked to answer it
        sim.advance(60)
        wall.t += 60
        iterate(target, k, PLAIN)
    assert wall.t == T0 + 1800 and k.override is None and entry.hold_ended == T0 + 1800
    assert events_text(entry).endswith("→ held until 00:30:00 → hold ended 00:30:00")


def test_no_hold_when_manual_hold_is_zero():
    wall = Wall(T0)
    target, sim = _target("auto", wall)
    target.config = replace(target.config, manual_hold=0.0)
    k = Knowledge.new("sim", target.config)
    sim.advance(600)
    scale = ControlMessage("s-1", "sim", "scale", sim.now, {"scaleout": 10, "reason": "r", "operator": "carol"})
    iterate(target, k, PLAIN, [scale])
    assert k.override is None


def test_the_ledger_artifact_is_a_block_per_entry_whose_lines_wrap_with_the_whole_reason():
    wall = Wall(T0)
    target, sim = _target("auto", wall)
    k = Knowledge.new("sim", target.config)
    sim.advance(600)
    reason = "load test | C_11 before the *sale* " + "x" * 60
    scale = ControlMessage("s-1", "sim", "scale", sim.now, {"scaleout": 10, "reason": reason, "operator": "carol"})
    iterate(target, k, PLAIN, [scale])
    lines = ledger_markdown("sim", ledger_rows(k)).splitlines()
    assert lines[:3] == ["# sim: the scaling ledger, newest first", "",
                         "**2026-01-01 00:00 UTC · 12 → 10** · decision `s-1`"]
    assert "- what happened: manual scale by carol 00:00:00 → executed 00:00:00 → held until 00:30:00" in lines
    # Whole, and shown as written (no table cell to cut it, no italics from its underscores or stars).
    assert "- reason: manual scale by carol: load test \\| C\\_11 before the \\*sale\\* " + "x" * 60 in lines
    assert ledger_markdown("idle", []).splitlines()[-1] == "(no entry yet)"


def test_the_forecast_horizon_is_named_one_way_in_every_artifact(tmp_path):
    # Issue 25: "the next 15 minutes" in one artifact, "next 30 min" on the plot, "over 1800 s" in the reasons.
    from daedalus.connectors.jobs import load_jobs
    from daedalus.tasks.approval import approval_markdown, approval_request
    from daedalus.tasks.artifacts import decision_markdown, forecast_markdown
    from daedalus.tasks.dashboards import forecast_plot_markdown
    from tests.ops.conftest import write_jobs

    wall = Wall(T0)
    target, sim = _target("approve", wall)
    k = Knowledge.new("sim", target.config)
    sim.advance(600)
    it = iterate(target, k, PLAIN)
    a = it.analysis
    assert len(a.forecast.values) == 1800 and k.pending is not None  # the forecaster's horizon, per second
    spec = load_jobs(write_jobs(tmp_path / "jobs.yaml", [{"name": "sim", "mode": "approve"}])).job("sim")
    for text in (decision_markdown("sim", a, it.decision, it.action, 1), forecast_markdown("sim", a),
                 forecast_plot_markdown("sim", b"", None, a.forecast),
                 approval_markdown(approval_request(it, k, spec))):
        assert "next 30 min" in text and "15 min" not in text
