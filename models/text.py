"""How values are shown to people: one place for UTC times, so every report reads the same."""

from __future__ import annotations

from datetime import UTC, datetime


def utc(t: float | None, *, zone: bool = True, unknown: str = "?") -> str:
    """Epoch seconds as `YYYY-MM-DD HH:MM:SS UTC` (without ` UTC` under a column that says so)."""
    if t is None:
        return unknown
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S" + (" UTC" if zone else ""))
