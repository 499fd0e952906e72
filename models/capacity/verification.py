"""Rescale verification: did an executed rescale buy the capacity the planner predicted for it?

A scale-out costs money from the minute it runs. When it cannot raise what the job processes (a stage that cannot
scale out, a source with fewer partitions than workers, a saturated sink behind the job) the extra workers are pure
waste, and a loop that trusts its capacity model keeps them. So every executed rescale is judged once the job has
recovered (or `verify_after_s` after it at the latest), by what the job processes per busy second at the new
scale-out (the capacity model's estimate there, bounded by each stage's records per busy second) against

- the capacity before the rescale, C_from, and the capacity predicted for the target, Ĉ_to, with the tolerance τ:
- a scale-out is **ineffective** when C_to ≤ (1 + τ) · C_from (it bought nothing; only judged when it was predicted
  to buy more than the noise, Ĉ_to > (1 + 2τ) · C_from) and the job showed at the target that it takes no more: it
  ran saturated there, or one of its stages did. A job that keeps up at the target with every stage to spare shows
  only an extrapolation of its CPU, and one made soon after the restart is biased low (the hottest worker is still
  catching up, so the others' share of CPU reads small): on the simulator, 3 → 4 workers (317,714 → 397,664/s)
  read 335,067/s at 4 two minutes after, was undone, and its hour under the ceiling broke the SLO for 3,835 s.
  Otherwise **effective** when C_to ≥ (1 − τ) · Ĉ_to, else **partly effective**, with the ratio C_to / Ĉ_to;
- a scale-in is **ineffective** when it overloaded the job beyond its prediction: C_to < (1 − τ) · Ĉ_to, it lost
  capacity the job had (C_to < (1 − τ) · C_from) and the job runs saturated there, more arriving than processed.

An ineffective scale-out is rolled back to the smallest scale-out that shows the same capacity within τ (observed
there, else estimated), and a *ceiling* keeps the planner at or below that target for
`ceiling`, cleared early once the bottleneck stage handles most of the ceiling's load with its busy share below
`BUSY_LIFTED`. An ineffective scale-in is rolled forward at once, to the scale-out it left; a rollback that proves
too small so raises its own ceiling.

The bottleneck is the stage that stays saturated (busy share ≥ `BUSY_SATURATED`, hardly backpressured) while every
other stage has time to spare; it cannot scale when it kept fewer subtasks than the job has workers (a non-parallel
operator, a stage at its maximum parallelism) or when it is a source already reading every partition.
The Flink Kubernetes operator's autoscaler has an effectiveness check (off by default) that never undoes a
rescale; rolling back an ineffective one is its open request FLINK-37411.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from daedalus.models.text import number, percent, utc
from daedalus.models.types import StageLoad

Verdict = Literal["effective", "partly effective", "ineffective"]

BUSY_SATURATED = 0.85  # a stage this busy has no time to spare (Flink's busy time per second, over 1000 ms)
BACKPRESSURE_FREE = 0.25  # …and one waiting on its downstream less than this is not held back by another stage
BUSY_LIFTED = 0.70  # a ceiling's stage below this busy share at LIFT_LOAD of the ceiling's load has room again
LIFT_LOAD = 0.8
MIN_BUSY = 0.05  # records per busy second of a stage busier than this are trusted
VERIFY_MIN_LOAD = 0.5  # an estimate extrapolated from below half load judges nothing (its noise is doubled)
VERIFY_WINDOW = 3.0  # a rescale not judged within this many `verify_after_s` is left unverified


@dataclass(frozen=True)
class Bottleneck:
    """The stage that limits the job, and whether more workers can help it."""

    stage: str
    busy: float
    scalable: bool
    why: str  # what keeps it from scaling, or "" when it can

    def describe(self) -> str:
        text = f"stage {self.stage} saturated (busy {percent(self.busy, digits=0)} of the time)"
        return f"{text}: {self.why}" if self.why else text


@dataclass
class PendingVerification:
    """An executed rescale waiting for its verdict: what was known and predicted when it was executed."""

    decision_id: str
    current: int  # the scale-out it left
    target: int
    before: float  # C_from: capacity at `current` then, tuples/s
    predicted: float  # Ĉ_to: the capacity the planner predicted at `target`
    executed: float  # the job's clock
    busy_before: dict[str, float]  # busy share per stage before it, for the evidence


@dataclass(frozen=True)
class Verification:
    """The verdict on one executed rescale, with its evidence."""

    decision_id: str
    current: int
    target: int
    before: float
    predicted: float
    observed: float
    verdict: Verdict
    busy_before: dict[str, float]
    busy_after: dict[str, float]
    bottleneck: Bottleneck | None = None

    @property
    def ratio(self) -> float:
        """Observed over predicted capacity at the target."""
        return self.observed / self.predicted if self.predicted > 0 else math.nan

    def evidence(self) -> str:
        """Capacity before and after, and each stage's busy share before and after: what the verdict rests on."""
        stages = ", ".join(f"{s} {percent(self.busy_before.get(s), digits=0)} → {percent(b, digits=0)}"
                           for s, b in self.busy_after.items())
        text = (f"capacity {number(self.before)}/s at {self.current}, {number(self.observed)}/s observed at "
                f"{self.target} against {number(self.predicted)}/s predicted ({percent(self.ratio, digits=0)})")
        text += f"; busy share per stage {stages}" if stages else ""
        return text + (f"; {self.bottleneck.describe()}" if self.bottleneck is not None else "")

    def describe(self) -> str:
        verdict = self.verdict if self.verdict != "partly effective" else \
            f"partly effective ({percent(self.ratio, digits=0)} of the prediction)"
        return f"rescale {self.current} → {self.target} {verdict}: {self.evidence()}"


@dataclass
class Ceiling:
    """No scale-out above `scaleout` until `until` (the job's clock): a larger one was seen to buy nothing."""

    scaleout: int
    until: float
    capacity: float  # what the job processed at the ineffective scale-out, tuples/s
    stage: str | None  # the bottleneck stage, when one was named
    reason: str

    def active(self, now: float) -> bool:
        return now < self.until

    def describe(self) -> str:
        return f"ceiling {self.scaleout} until {utc(self.until)}: {self.reason}"


def stage_capacity(stage: StageLoad) -> float:
    """Records per busy second of a stage: what it would take in fully busy (DS2's true processing rate); ∞ when it
    is too idle to tell."""
    return stage.records_in / stage.busy if stage.busy >= MIN_BUSY else math.inf


def observed_capacity(model_capacity: float, stages: Sequence[StageLoad]) -> float:
    """The job's capacity as observed now: the capacity model's estimate at the current scale-out, at most what its
    slowest stage processes per busy second (per-worker records per busy second cannot see a stage that only some
    workers run)."""
    bound = min((stage_capacity(s) for s in stages), default=math.inf)
    return min(model_capacity, bound)


def locate_bottleneck(stages: Sequence[StageLoad], scaleout: int, partitions: int | None = None
                      ) -> Bottleneck | None:
    """The stage saturated while the others have time to spare, or None (no stage saturated, or several)."""
    saturated = [s for s in stages if s.busy >= BUSY_SATURATED and s.backpressured <= BACKPRESSURE_FREE]
    if len(saturated) != 1:
        return None
    stage = saturated[0]
    if any(s.busy >= BUSY_SATURATED for s in stages if s is not stage):
        return None
    if stage.parallelism < scaleout:
        why = (f"it runs {stage.parallelism} subtask{'s' if stage.parallelism > 1 else ''} at scale-out {scaleout} "
               "(a non-parallel operator, or at its maximum parallelism): more workers do not help it")
        return Bottleneck(stage.name, stage.busy, False, why)
    if stage.source and partitions is not None and scaleout >= partitions:
        return Bottleneck(stage.name, stage.busy, False,
                          f"a source reading all {partitions} partitions: more workers would idle")
    return Bottleneck(stage.name, stage.busy, True, "")


def busy_shares(stages: Sequence[StageLoad]) -> dict[str, float]:
    return {s.name: s.busy for s in stages}


def judge(pending: PendingVerification, observed: float, overloaded: bool, tolerance: float, *,
          saturated: bool) -> Verdict:
    """The verdict on a rescale from the capacity observed at its target (see the module's docstring). A scale-out
    predicted to buy no more than the noise (2τ) cannot be told from one that bought nothing: never ineffective;
    nor one the job did not show saturated at the target (`saturated`: the job, or one of its stages, ran at what it
    can take there), whose observed capacity is an extrapolation. `overloaded`: the job ran saturated at the target
    with more arriving than it processed."""
    if pending.target > pending.current:
        measurable = pending.predicted > (1 + 2 * tolerance) * pending.before
        if measurable and saturated and observed <= (1 + tolerance) * pending.before:
            return "ineffective"
        return "effective" if observed >= (1 - tolerance) * pending.predicted else "partly effective"
    if observed >= (1 - tolerance) * pending.predicted:
        return "effective"
    lost = observed < (1 - tolerance) * pending.before  # it gave up capacity the job had, and needs it
    return "ineffective" if lost and overloaded else "partly effective"


def ready_to_judge(pending: PendingVerification, now: float, recovered: bool, verify_after_s: float,
                   load: float, saturated: bool) -> bool:
    """Whether the evidence is in: the job recovered (or `verify_after_s` passed) and it ran loaded enough that
    its records per busy second are not an extrapolation from idle (or it ran saturated: a measurement)."""
    if not (recovered or now - pending.executed >= verify_after_s):
        return False
    return saturated or load >= VERIFY_MIN_LOAD


def rollback_target(verification: Verification, capacities: Sequence[float], min_scaleout: int,
                    tolerance: float) -> int:
    """Where an ineffective rescale goes back to. A scale-out: the smallest scale-out below its target whose capacity
    (the observed one where it was observed, else the estimate) reaches what the target showed, within the tolerance;
    else the scale-out it left. A scale-in: the scale-out it left."""
    if verification.target < verification.current:
        return verification.current
    floor = (1 - tolerance) * verification.observed
    return next((i for i in range(min_scaleout, verification.target) if capacities[i - 1] >= floor),
                verification.current)


def lifted(ceiling: Ceiling, stages: Sequence[StageLoad]) -> str | None:
    """Why the ceiling no longer holds, or None: its stage handles most of the load that saturated it with its busy
    share below `BUSY_LIFTED` (it got faster, or another stage now carries the work)."""
    stage = next((s for s in stages if s.name == ceiling.stage), None)
    if stage is None or stage.records_in < LIFT_LOAD * ceiling.capacity or stage.busy >= BUSY_LIFTED:
        return None
    return (f"stage {stage.name} takes {number(stage.records_in)}/s at busy {percent(stage.busy, digits=0)} "
            f"(it was saturated at {number(ceiling.capacity)}/s): the ceiling of {ceiling.scaleout} is lifted")
