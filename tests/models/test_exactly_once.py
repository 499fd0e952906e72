"""Exactly once across process deaths: the intent is written before the target is touched, and the next run
settles what a dead run left instead of deciding and patching again (issue 11, item 6)."""

from __future__ import annotations

import numpy as np
import pytest

from daedalus.models.config import LoopConfig
from daedalus.models.errors import ConnectorError
from daedalus.models.knowledge import Knowledge
from daedalus.models.loop.iteration import PLAIN, iterate
from daedalus.models.ports import Target
from daedalus.sim.job import SimulatedJob
from daedalus.sim.simulator import SimConfig, Simulator


class Killed(BaseException):
    """The process dies (SIGKILL, OOM): nothing after this point of the run happens."""


class DyingScaler(SimulatedJob):
    """Scales the simulated job, then the run dies before it can record anything (or before it patches)."""

    def __init__(self, sim: Simulator, die_after_patch: bool = True) -> None:
        super().__init__(sim)
        self.die_after_patch = die_after_patch
        self.patches: list[int] = []

    def scale(self, job: str, target: int, decision_id: str, dry_run: bool = False) -> str:
        if not dry_run and self.die_after_patch:
            self.patches.append(target)
            super().scale(job, target, decision_id)
        raise Killed


class CountingScaler(SimulatedJob):
    def __init__(self, sim: Simulator) -> None:
        super().__init__(sim)
        self.patches: list[int] = []

    def scale(self, job: str, target: int, decision_id: str, dry_run: bool = False) -> str:
        if not dry_run:
            self.patches.append(target)
        return super().scale(job, target, decision_id, dry_run)


def _job(scaleout: int = 12) -> tuple[Simulator, LoopConfig]:
    # Half the capacity of 12 workers, flat: Daedalus wants to scale in from 12.
    sim = Simulator(np.full(7200, 250_000.0), SimConfig(max_scaleout=12, downtime_noise_s=0.0), seed=1,
                    initial_scaleout=scaleout)
    return sim, LoopConfig(max_scaleout=12, scale_in_interval=0)


def _until_first_action(sim: Simulator, cfg: LoopConfig, scaler, journal) -> Knowledge:
    """Loops until a run dies in its action; returns the knowledge as the journal last wrote it."""
    k = Knowledge.new("sim", cfg)
    target = Target("sim", SimulatedJob(sim), scaler, SimulatedJob(sim), cfg)
    for _ in range(60):
        sim.advance(60)
        try:
            iterate(target, k, PLAIN, journal=journal)
        except Killed:
            return Knowledge.from_bytes(journal.saved[-1])
    raise AssertionError("the loop never acted")


class Journal:
    def __init__(self) -> None:
        self.saved: list[bytes] = []

    def __call__(self, k: Knowledge) -> None:
        self.saved.append(k.to_bytes())


def test_a_run_killed_after_the_patch_is_reconciled_and_never_patched_twice() -> None:
    sim, cfg = _job()
    dying, journal = DyingScaler(sim), Journal()
    k = _until_first_action(sim, cfg, dying, journal)
    intent = [e for e in k.ledger if e.state == "executing"]
    assert len(intent) == 1 and dying.patches == [intent[0].target] and sim.scaleout == intent[0].target
    assert k.last_action == intent[0].time  # the grace period was written with the intent

    counting = CountingScaler(sim)
    target = Target("sim", SimulatedJob(sim), counting, SimulatedJob(sim), cfg)
    sim.advance(60)
    it = iterate(target, k, PLAIN, journal=journal)
    entry = k.entry(intent[0].id)
    assert entry.state == "executed" and any("reconciled" in what for _, what in entry.history)
    assert any("unfinished action" in n and "executed" in n for n in it.notes)
    assert k.last_rescale == intent[0].time  # the recovery is followed from the rescale on
    assert k.watch is not None or entry.observed_recovery_s is not None
    assert counting.patches == []  # inside the grace period of the intent: no second rescale
    assert it.decision.kind in ("hold", "no-change")


def test_a_run_killed_before_the_patch_is_abandoned_and_its_grace_period_kept() -> None:
    sim, cfg = _job()
    dying, journal = DyingScaler(sim, die_after_patch=False), Journal()
    k = _until_first_action(sim, cfg, dying, journal)
    intent = next(e for e in k.ledger if e.state == "executing")
    assert dying.patches == [] and sim.scaleout == 12

    counting = CountingScaler(sim)
    target = Target("sim", SimulatedJob(sim), counting, SimulatedJob(sim), cfg)
    sim.advance(60)
    iterate(target, k, PLAIN, journal=journal)
    assert k.entry(intent.id).state == "abandoned"
    assert counting.patches == []  # the intent's grace period holds
    for _ in range(int(cfg.grace_s // 60) + 1):
        sim.advance(60)
        iterate(target, k, PLAIN, journal=journal)
    assert len(counting.patches) == 1  # after the grace period the loop decides afresh, once


def test_the_intent_is_durable_before_the_target_is_touched() -> None:
    sim, cfg = _job()
    order: list[str] = []

    class Recording(SimulatedJob):
        def scale(self, job: str, target: int, decision_id: str, dry_run: bool = False) -> str:
            order.append("patch")
            return super().scale(job, target, decision_id, dry_run)

    def journal(k: Knowledge) -> None:
        order.append("journal:" + next(e.state for e in reversed(k.ledger) if e.state != "decided"))

    k = Knowledge.new("sim", cfg)
    target = Target("sim", SimulatedJob(sim), Recording(sim), SimulatedJob(sim), cfg)
    while "patch" not in order:
        sim.advance(60)
        iterate(target, k, PLAIN, journal=journal)
    assert order == ["journal:executing", "patch"]


def test_a_refused_patch_keeps_no_grace_period() -> None:
    sim, cfg = _job()

    class Refusing(SimulatedJob):
        def scale(self, job: str, target: int, decision_id: str, dry_run: bool = False) -> str:
            raise ConnectorError("403 Forbidden")

    k = Knowledge.new("sim", cfg)
    target = Target("sim", SimulatedJob(sim), Refusing(sim), SimulatedJob(sim), cfg)
    for _ in range(60):
        sim.advance(60)
        it = iterate(target, k, PLAIN)
        if it.action is not None:
            break
    assert it.action.state == "failed" and k.last_action is None


@pytest.mark.parametrize("reported", [8, 3])
def test_target_and_metrics_that_disagree_hold_with_both_numbers(reported: int) -> None:
    sim, cfg = _job(scaleout=5)

    class Disagreeing(CountingScaler):
        def current(self, job: str) -> int:
            return reported

    scaler = Disagreeing(sim)
    k = Knowledge.new("sim", cfg)
    target = Target("sim", SimulatedJob(sim), scaler, SimulatedJob(sim), cfg)
    for _ in range(30):
        sim.advance(60)
        it = iterate(target, k, PLAIN)
        assert it.decision.kind == "hold"
        assert any(f"reports {reported} but the metrics show 5" in r for r in it.decision.reasons)
    assert scaler.patches == []
