"""A fixed piece of interpreter work, timed beside the fleet's figures so that figures from different machines compare.

The same code measured 0.95 CPU-s per job-minute on one morning's machine and 1.54 on the afternoon's (docs/fleet.md):
a machine's speed moved the figures more than a day's changes did, and so does its load: on this virtual machine the
work below took 0.12 CPU-s idle and 0.28 beside a 50-job fleet (a CPU-second under load does less). The control
plane's cost is Python's: building dicts and models, serialising JSON, formatting strings. This is that kind of
work, fixed; its CPU time says how fast the machine ran it, and divided by it the figures are in units of this work.
"""

from __future__ import annotations

import json
import statistics
import time

REPEATS = 5


def _work() -> int:
    """About 0.1 CPU-s on a 2026 server core; the result is used, so nothing is skipped."""
    records = [{"id": i, "name": f"run-{i:06d}", "state": ("Pending", "Running", "Completed")[i % 3],
                "tags": [str(i % 7), str(i % 11)]} for i in range(35_000)]
    text = json.dumps(records)
    back = json.loads(text)
    return sum(len(r["name"]) + len(r["tags"]) for r in back if r["state"] != "Pending")


def reference_cpu_s(repeats: int = REPEATS) -> float:
    """The median CPU-seconds of the fixed work (this process's own CPU time, so another process's load counts only
    as far as it slows this one down)."""
    times = []
    for _ in range(repeats):
        start = time.process_time()
        _work()
        times.append(time.process_time() - start)
    return round(statistics.median(times), 4)
