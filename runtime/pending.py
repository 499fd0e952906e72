"""Runs left Pending by a worker that died: crashed by the workers still alive.

A worker claims a run (Pending) a few seconds before it starts it; a worker killed in between (a lost node, an
evicted pod, `daedalus bench chaos`) leaves the run Pending for ever. Its job's concurrency slot comes back when the
slot's lease expires (the fleet sets that to a minute), but the run itself would stay Pending. Prefect's automations
cannot catch it soon: a Pending event waits up to 15 minutes in the server's causal ordering for the Scheduled
event it follows, which the scheduler never sends. So every `daedalus worker` looks, once a minute, for runs of
its pool Pending for longer than a healthy start ever takes (`STALE_AFTER_S`) and marks them Crashed. Several
workers doing it at once is harmless: a run already Crashed refuses the second change.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from datetime import UTC, datetime
from typing import Any

STALE_AFTER_S = 90.0  # a healthy run goes Pending → Running in seconds (a forked process), even on a loaded machine
EVERY_S = 60.0
MESSAGE = "Crashed: left Pending by a worker that is gone (daedalus worker, runtime/pending.py)"


def _call(url: str, body: dict[str, Any]) -> Any:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.load(r)


def crash_stale_pending(api_url: str, pool: str, older_than_s: float = STALE_AFTER_S, now: float | None = None
                        ) -> list[str]:
    """Mark Crashed the runs of `pool` Pending for more than `older_than_s`; their ids."""
    now = time.time() if now is None else now
    runs = _call(f"{api_url}/flow_runs/filter", {
        "flow_runs": {"state": {"type": {"any_": ["PENDING"]}}},
        "work_pools": {"name": {"any_": [pool]}}, "limit": 200})
    crashed = []
    for run in runs:
        since = datetime.fromisoformat(run["state"]["timestamp"]).astimezone(UTC).timestamp()
        if now - since < older_than_s:
            continue
        answer = _call(f"{api_url}/flow_runs/{run['id']}/set_state",
                       {"state": {"type": "CRASHED", "name": "Crashed", "message": MESSAGE}, "force": False})
        if answer.get("status") == "ACCEPT":
            crashed.append(run["id"])
    return crashed


def start_reaper(api_url: str, pool: str, stop: threading.Event, every_s: float = EVERY_S) -> threading.Thread:
    """A daemon thread that runs `crash_stale_pending` every `every_s` until `stop` is set; errors (the API away
    for a while) are printed and the next round tries again."""
    def loop() -> None:
        while not stop.wait(every_s):
            try:
                for run_id in crash_stale_pending(api_url, pool):
                    print(f"daedalus worker: flow run {run_id} was left Pending by a worker that is gone: Crashed",
                          flush=True)
            except (OSError, ValueError, KeyError) as exc:
                print(f"daedalus worker: could not look for runs left Pending ({exc}); trying again", flush=True)

    thread = threading.Thread(target=loop, name="pending-reaper", daemon=True)
    thread.start()
    return thread
