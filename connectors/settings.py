"""What every connector's typed settings share: a strict model (unknown keys are errors) and durations.

Durations accept seconds (`600`) or a unit (`600s`, `10m`, `1h`, `500ms`).
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def seconds(value: Any) -> Any:
    """A duration string as seconds; anything else is left for the field's own type check."""
    if isinstance(value, str):
        m = _DURATION.match(value)
        if not m:
            raise ValueError(f"not a duration: {value!r} (use e.g. 600, 600s, 10m, 1h)")
        return float(m.group(1)) * _UNITS[m.group(2)]
    return value


Duration = Annotated[float, BeforeValidator(seconds), Field(gt=0)]
NonNegativeDuration = Annotated[float, BeforeValidator(seconds), Field(ge=0)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
