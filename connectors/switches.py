"""Why the loop must not act now: the kill switch for all jobs (kept by the job store at its root, read at the start
of every loop run, so it also covers jobs deployed later) and the job's blackout windows. Both stop the loop's own
actions, never an operator's: the loop still monitors, decides and reports; its ledger records the action it did
not take."""

from __future__ import annotations

from datetime import UTC, datetime

from daedalus.connectors.jobs import JobSpec
from daedalus.connectors.store import Store
from daedalus.models.text import utc


def stop_reason(store: Store, spec: JobSpec | None, now: float) -> str | None:
    """Why the loop must not act now (kill switch for all jobs, a blackout window), or None."""
    switch = store.kill_switch()
    if switch is not None:
        return (f"kill switch for all jobs is on (set by {switch.get('operator')} at {utc(switch.get('time'))}: "
                f"{switch.get('reason') or 'no reason given'})")
    if spec is not None:
        clock = datetime.fromtimestamp(now, UTC).time()
        for b in spec.blackout:
            if b.contains(clock):
                return f"blackout window {b.start:%H:%M}–{b.end:%H:%M} UTC"
    return None
