"""Execute: a thin task over models.loop.execute (exactly once per decision id, recorded in the ledger)."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from daedalus.models.config import LoopConfig
from daedalus.models.knowledge import Knowledge
from daedalus.models.loop import execute as phase
from daedalus.models.ports import Scaler
from daedalus.models.types import Decision, ScalingAction


@task(name="execute", cache_policy=NO_CACHE)
def execute(cfg: LoopConfig, decision: Decision, knowledge: Knowledge, scaler: Scaler, now: float,
            operator: bool = False, stop: str | None = None, journal: phase.Journal | None = None,
            wall_now: float | None = None) -> ScalingAction | None:
    return phase.execute(cfg, decision, knowledge, scaler, now, operator=operator, stop=stop, journal=journal,
                         wall_now=wall_now)
