"""`daedalus bench monitor`: what the monitor phase costs against a real Prometheus.

A simulated 12-worker Flink job is exported to a local Prometheus (started here) for `hours` of history, scraped
as it is stepped; then the monitor phase (`PrometheusSource.observe`) reads one loop's minute and the whole
history, at steps of 1 s and 15 s, `repeats` times each. Median and p95 per case, in milliseconds.
"""

from __future__ import annotations

import math
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

WORKERS = 12


def run_monitor_bench(hours: float, repeats: int,
                      on_progress: Callable[[str, int, int | None], None] | None = None) -> dict[str, Any]:
    """Monitor cost for one 12-worker job against a local Prometheus holding `hours` of simulated history.

    `on_progress(phase, done, total)` follows the backfill and the timing runs, so a caller can draw bars.
    """
    from daedalus.connectors.prometheus import PrometheusSource
    from daedalus.connectors.promql import QuerySet
    from daedalus.runtime.prometheus import local_prometheus
    from daedalus.sim.exporter import SimExporter
    from daedalus.sim.scenario import scenario
    from daedalus.sim.simulator import SimConfig, Simulator
    from daedalus.sim.workloads import sine_workload

    report = on_progress or (lambda phase, done, total: None)
    sim_config, _, workload = scenario(sine_workload(hours=hours), WORKERS, 0.9, 0)
    start = float(int(time.time()) - int(hours * 3600) - 60)
    sim = Simulator(workload, SimConfig(**{**sim_config.__dict__, "start": start}), seed=0)
    labels = {"namespace": "bench", "cluster": "sim-flink"}
    figures: dict[str, Any] = {"hours": hours, "workers": WORKERS, "repeats": repeats, "cases": []}
    with tempfile.TemporaryDirectory() as tmp, SimExporter(sim, labels, "bench-events") as exporter, \
            local_prometheus(Path(tmp), [f"127.0.0.1:{exporter.port}"], "200ms", lookback="500ms") as url:
        chunk = 60
        done = 0
        report("backfilling through scrapes", done, len(workload))
        while done < len(workload):
            n = min(chunk, len(workload) - done)
            exporter.step(n)
            exporter.sync(url)
            done += n
            report("backfilling through scrapes", done, len(workload))
        end = sim.now
        cases = [("one loop (60 s) at step 1 s", 1, 60.0), ("one loop (60 s) at step 15 s", 15, 60.0),
                 (f"{hours:g} h at step 15 s", 15, hours * 3600), (f"{hours:g} h at step 1 s", 1, hours * 3600)]
        timed = 0
        report("timing the monitor phase", timed, len(cases) * repeats)
        for name, step, window in cases:
            queries = QuerySet("bench", "flink", labels, {"topic": "bench-events"}, {}, 4 * step)
            source = PrometheusSource("bench", queries, url, step_s=step)
            ms = []
            for _ in range(repeats):
                started = time.perf_counter()
                obs = source.observe("bench", end - window, end)
                ms.append(1000 * (time.perf_counter() - started))
                timed += 1
                report("timing the monitor phase", timed, len(cases) * repeats)
            ms.sort()
            figures["cases"].append({"case": name, "steps": int(obs.timestamps.size), "workers": len(obs.workers),
                                     "median_ms": round(statistics.median(ms), 1),
                                     "p95_ms": round(ms[max(0, math.ceil(0.95 * len(ms)) - 1)], 1),
                                     "holds": list(obs.holds)})
    return figures
