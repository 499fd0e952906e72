"""Autoscaling policies: the Daedalus loop and the baselines it is compared with.

`daedalus` is the full MAPE-K loop (run by sim.runner through flows.mape_k.iterate); every other name maps
to a small class with the `Policy` interface of models.policies.base.
"""

from __future__ import annotations

from models.policies.base import Policy, Static
from models.policies.ds2 import DS2
from models.policies.hpa import HPA

DAEDALUS = "daedalus"


def names() -> tuple[str, ...]:
    return (DAEDALUS, "static", "hpa-80", "hpa-85", "ds2")


def make(name: str, max_scaleout: int) -> Policy | str:
    """The policy called `name`; the string "daedalus" stands for the full loop."""
    if name == DAEDALUS:
        return DAEDALUS
    if name == "static":
        return Static(max_scaleout)
    if name in ("hpa-80", "hpa-85"):
        return HPA(int(name[4:]) / 100, max_scaleout)
    if name == "ds2":
        return DS2(max_scaleout)
    raise ValueError(f"no policy {name!r}; known: {', '.join(names())}")
