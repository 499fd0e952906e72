"""Checked numbers: the inputs of an online statistic's update, and the stored state it is rebuilt from.

An update rejects NaN and inf (``ValueError``): one folded into a running sum would poison it for good. Every
model persists as a ``dict[str, float]`` (``to_state``) and is rebuilt by ``from_state``; a stored version that
lacks a key or holds a non-number fails with a ``KnowledgeError`` naming the class and the key, never with a
bare KeyError deep inside a loop. One implementation, shared by the statistics and the anomaly models.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from daedalus.models.errors import KnowledgeError

__all__ = ["finite", "finite_batch", "number", "numbers", "require_keys"]


def require_keys(cls: type, state: Mapping[str, Any], keys: tuple[str, ...]) -> None:
    """Raise a KnowledgeError naming every key of `keys` that `state` lacks."""
    missing = [key for key in keys if key not in state]
    if missing:
        raise KnowledgeError(f"{cls.__name__} state lacks {', '.join(missing)}; got keys {sorted(state)}")


def number(cls: type, state: Mapping[str, Any], key: str) -> float:
    """`state[key]` as a finite float, else a KnowledgeError.

    >>> number(dict, {"n": "3"}, "n")
    3.0
    """
    try:
        value = float(state[key])
    except (TypeError, ValueError):
        raise KnowledgeError(f"{cls.__name__} state: {key} is not a number ({state[key]!r})") from None
    if not math.isfinite(value):
        raise KnowledgeError(f"{cls.__name__} state: {key} is not finite ({value!r})")
    return value


def numbers(cls: type, state: Mapping[str, Any], keys: tuple[str, ...]) -> dict[str, float]:
    """Every key of `keys` present and a finite number: their values."""
    require_keys(cls, state, keys)
    return {key: number(cls, state, key) for key in keys}


def finite(value: float, what: str) -> float:
    """An update's input as a float; NaN or inf is a ValueError (one would poison a running sum for good)."""
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{what} must be a finite number, got {value!r}; drop missing samples first")
    return value


def finite_batch(values: object, what: str) -> np.ndarray:
    """A batch as a flat float array, all finite, else a ValueError."""
    array = np.asarray(values, dtype=float).ravel()
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{what} must all be finite numbers; drop missing samples (NaN, inf) first")
    return array
