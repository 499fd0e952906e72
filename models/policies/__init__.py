"""Autoscaling policies: Daedalus and the baselines it is compared with, behind one interface (base.Policy)."""

from __future__ import annotations

from daedalus.models.config import LoopConfig
from daedalus.models.policies.base import Baseline, Policy, Static, Step
from daedalus.models.policies.daedalus import Daedalus
from daedalus.models.policies.ds2 import DS2
from daedalus.models.policies.hpa import HPA

__all__ = ["DS2", "HPA", "Baseline", "Daedalus", "Policy", "Static", "Step", "make", "names"]


def names() -> tuple[str, ...]:
    return ("daedalus", "static", "hpa-80", "hpa-85", "ds2")


def make(name: str, max_scaleout: int, loop_config: LoopConfig | None = None) -> Policy:
    """The policy called `name`; Daedalus runs with `loop_config` (default: the paper's settings)."""
    if name == "daedalus":
        return Daedalus(loop_config or LoopConfig(max_scaleout=max_scaleout))
    if name == "static":
        return Static(max_scaleout)
    if name in ("hpa-80", "hpa-85"):
        return HPA(int(name[4:]) / 100, max_scaleout)
    if name == "ds2":
        return DS2(max_scaleout)
    raise ValueError(f"no policy {name!r}; known: {', '.join(names())}")
