"""Analyze: a thin task over models.loop.analyze."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from daedalus.models.config import LoopConfig
from daedalus.models.knowledge import Knowledge
from daedalus.models.loop import analyze as phase
from daedalus.models.types import Analysis, Observation


@task(name="analyze", cache_policy=NO_CACHE)
def analyze(cfg: LoopConfig, obs: Observation, knowledge: Knowledge, now: float) -> Analysis:
    return phase.analyze(cfg, obs, knowledge, now)
