"""The kill switch for all jobs: a flag file at the store's root, read at the start of every loop run (so it also
covers jobs deployed later), and the job's blackout windows. Both stop the loop's own actions, never an
operator's: the loop still monitors, decides and reports; its ledger records the action it did not take."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

import fsspec

from daedalus.connectors.jobs import JobSpec
from daedalus.models.text import utc

KILL_SWITCH = "PAUSED-ALL.json"  # a file at the store's root: job folders are the only directories there


def _root(store_url: str) -> tuple[Any, str]:
    return fsspec.core.url_to_fs(store_url.rstrip("/"))


def kill_switch(store_url: str) -> dict[str, Any] | None:
    """The kill switch for all jobs, if it is on: who set it, when and why."""
    fs, root = _root(store_url)
    try:
        with fs.open(f"{root}/{KILL_SWITCH}", "r") as f:
            return json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {"operator": "?", "reason": "unreadable kill-switch file: treated as on", "time": None}


def set_kill_switch(store_url: str, operator: str, reason: str) -> None:
    fs, root = _root(store_url)
    fs.makedirs(root, exist_ok=True)
    tmp = f"{root}/.tmp-{KILL_SWITCH}"
    with fs.open(tmp, "w") as f:
        json.dump({"operator": operator, "reason": reason, "time": time.time()}, f)
    fs.mv(tmp, f"{root}/{KILL_SWITCH}")


def clear_kill_switch(store_url: str) -> bool:
    """Turn the kill switch off; False if it was not on."""
    fs, root = _root(store_url)
    path = f"{root}/{KILL_SWITCH}"
    if not fs.exists(path):
        return False
    fs.rm(path)
    return True


def stop_reason(store_url: str, spec: JobSpec | None, now: float) -> str | None:
    """Why the loop must not act now (kill switch for all jobs, a blackout window), or None."""
    switch = kill_switch(store_url)
    if switch is not None:
        return (f"kill switch for all jobs is on (set by {switch.get('operator')} at {utc(switch.get('time'))}: "
                f"{switch.get('reason') or 'no reason given'})")
    if spec is not None:
        clock = datetime.fromtimestamp(now, UTC).time()
        for b in spec.blackout:
            if b.contains(clock):
                return f"blackout window {b.start:%H:%M}–{b.end:%H:%M} UTC"
    return None
