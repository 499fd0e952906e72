"""Capacity (the paper's capacity model): per-worker CPU–throughput regressions and the capacity per scale-out."""

from daedalus.models.capacity.model import CapacityModel
from daedalus.models.capacity.regression import OnlineRegression

__all__ = ["CapacityModel", "OnlineRegression"]
