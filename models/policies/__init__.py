"""Autoscaling policies: Daedalus and the baselines it is compared with, behind one interface (base.Policy)."""

from __future__ import annotations

from dataclasses import replace

from daedalus.models.config import LoopConfig
from daedalus.models.policies.base import Baseline, Policy, Static, Step
from daedalus.models.policies.daedalus import Daedalus
from daedalus.models.policies.ds2 import DS2
from daedalus.models.policies.flink_autoscaler import FlinkAutoscaler
from daedalus.models.policies.hpa import HPA
from daedalus.models.policies.oracle import Oracle

__all__ = ["DS2", "HPA", "Baseline", "Daedalus", "FlinkAutoscaler", "Oracle", "Policy", "Static", "Step", "make",
           "names"]


def names() -> tuple[str, ...]:
    return ("daedalus", "daedalus-paper", "static", "hpa-80", "hpa-85", "ds2", "flink-autoscaler", "oracle")


def make(name: str, max_scaleout: int, loop_config: LoopConfig | None = None) -> Policy:
    """The policy called `name`. `daedalus` and `daedalus-paper` run the whole loop with `loop_config` (default:
    the LoopConfig defaults up to the job's maximum), with the planner their name says."""
    if name in ("daedalus", "daedalus-paper"):
        cfg = replace(loop_config or LoopConfig(max_scaleout=max_scaleout), planner=name)
        return Daedalus(cfg, name=name)
    if name == "static":
        return Static(max_scaleout)
    if name in ("hpa-80", "hpa-85"):
        return HPA(int(name[4:]) / 100, max_scaleout)
    if name == "ds2":
        return DS2(max_scaleout)
    if name == "flink-autoscaler":
        return FlinkAutoscaler(max_scaleout)
    if name == "oracle":
        return Oracle()
    raise ValueError(f"no policy {name!r}; known: {', '.join(names())}")
