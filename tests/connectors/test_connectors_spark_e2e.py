"""A real streaming engine: a Spark Structured Streaming query running locally, watched through a real
Prometheus and rescaled by the control loop (scale target `spark-local`: stop, restart from the checkpoint
with the new scaleout).

The job reads files a feeder writes at the workload's rate; its progress metrics, published by the listener any
Spark job adds (runtime/spark_progress.py), are scraped every second and read by the default Spark queries.
The loop runs every 10 s through models.loop.iteration.iterate (PLAIN phases) in `dry-run` mode, so the planner's own
decisions are reported but not acted on; two operator scale messages (1 → 2, then 2 → 1) go through the
same loop and its execute phase, so the test knows when the rescales happen. It checks that the loop's
capacity estimates follow the measured throughput and that no row is lost or duplicated across rescales.
"""

from __future__ import annotations

import math
import subprocess
import sys
import time

import numpy as np
import pytest
from connectors_support import needs_prometheus

from daedalus.connectors.clock import WallClock
from daedalus.connectors.prometheus import PrometheusSource
from daedalus.connectors.promql import QuerySet
from daedalus.connectors.spark_local import SparkLocalScaler
from daedalus.models.config import LoopConfig
from daedalus.models.knowledge import Knowledge
from daedalus.models.loop.iteration import PLAIN, iterate
from daedalus.models.loop.messages import ControlMessage
from daedalus.models.ports import Target
from daedalus.runtime.ports import free_port
from daedalus.runtime.prometheus import local_prometheus
from daedalus.runtime.spark_stream import read_json

pytestmark = [needs_prometheus, pytest.mark.slow]

JOB = "spark-local"
# 70 s at more rows/s than the job processes at scaleout 1 here (it falls behind), then 30 s calmer. The operator's
# scale-out to 2 (at about 40 s) meets the same load: a scale-out is judged where it works. Judged only on the calm
# part, it was not: records per busy second at a quarter of capacity read low (a micro-batch's fixed cost;
# docs/engines.md), and the two-slot estimate once came out below the one-slot capacity.
PROFILE = [8000] * 70 + [2500] * 30


def _wait_for(path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear within {timeout} s")
        time.sleep(0.5)


def test_the_loop_rescales_a_local_spark_query_without_losing_or_duplicating_rows(tmp_path):
    workdir = tmp_path / "clicks"
    (tmp_path / "workload.txt").write_text("\n".join(map(str, PROFILE)))
    port = free_port()
    log = (tmp_path / "spark.log").open("w")
    job = subprocess.Popen([sys.executable, "-m", "daedalus.runtime.spark_stream", str(workdir), "--workload",
                            str(tmp_path / "workload.txt"), "--metrics-port", str(port), "--parallelism", "1",
                            "--cores", "2", "--rounds", "400", "--app", JOB], stdout=log, stderr=subprocess.STDOUT)
    loops = []
    try:
        with local_prometheus(tmp_path / "prom", [f"127.0.0.1:{port}"], "1s") as url:
            _wait_for(workdir / "state.json", 120)
            cfg = LoopConfig(min_scaleout=1, max_scaleout=2, warmup_s=5, loop_interval_s=10, grace_s=10,
                             recent_rescale_s=10, checkpoint_interval=1, mode="dry-run")
            queries = QuerySet(JOB, "spark", {"query": JOB}, {"topic": workdir.name}, {}, 5, 3)
            scaler = SparkLocalScaler(workdir, ready_timeout_s=60)
            target = Target(JOB, PrometheusSource(JOB, queries, url, step_s=1), scaler, WallClock(), cfg)
            knowledge = Knowledge.new(JOB, cfg)
            for n in range(10):
                time.sleep(10)
                messages = []
                if n in (3, 7):
                    messages = [ControlMessage(f"op-{n}", JOB, "scale", time.time(),
                                               {"scaleout": 2 if n == 3 else 1, "operator": "test"})]
                loops.append(iterate(target, knowledge, PLAIN, messages))
            (workdir / "stop").write_text("")
            job.wait(timeout=180)
    finally:
        if job.poll() is None:
            job.terminate()
            job.wait(timeout=30)
        log.close()

    result = read_json(workdir / "result.json")
    assert result is not None, (tmp_path / "spark.log").read_text()[-3000:]
    # Nothing lost, nothing twice: every row fed is in the sink exactly once.
    assert result["fed"] == result["rows_out"] == result["distinct_ids"] > 0

    executed = [(it.action.current, it.action.target) for it in loops if it.action and it.action.state == "executed"]
    assert executed == [(1, 2), (2, 1)]
    assert [it.observation.scaleout for it in loops][4:7] == [2, 2, 2]

    rows = []
    for i, it in enumerate(loops):
        obs, a = it.observation, it.analysis
        total = np.nansum(np.vstack([obs.throughput[w] for w in obs.workers]), axis=0) if obs.workers else []
        measured = float(np.mean(total)) if len(total) else math.nan
        # Saturated: more than 3 s of input waiting at every step and processing clearly (10 %) below the input
        # rate, so it processes as fast as it can. A job that keeps pace with its input, draining a backlog a
        # micro-batch at a time a few percent below the input rate, says nothing about its capacity.
        # Nor does the loop after a rescale: its window holds the restart, when the job processes nothing.
        restarted = i > 0 and loops[i - 1].action is not None and loops[i - 1].action.state == "executed"
        behind = (not restarted and obs.lag.size > 0 and np.nanmin(obs.lag) > 3 * np.nanmean(obs.workload)
                  and measured < 0.9 * np.nanmean(obs.workload))
        rows.append((a.scaleout, round(a.capacity(a.scaleout)), round(measured), bool(behind), a.holds))
    print("\nscale-out, capacity estimate, measured throughput, saturated, holds:", *rows, sep="\n  ")
    estimates = {}
    for n in (1, 2):
        # Saturated, the job processes as fast as it can: its capacity is what it processes then. The machine is
        # shared with other work, so what it processes moves by tens of percent from one loop to the next.
        # Whether the 8,000 rows/s phase saturates a slot depends on how busy the machine is: when it does not,
        # the capacity must still cover what the job was seen to process.
        measured = [m for k, c, m, behind, holds in rows if k == n and behind and not holds and c > 0]
        processed = [m for k, c, m, _, holds in rows if k == n and not holds and c > 0]
        estimates[n] = [c for k, c, _, _, holds in rows if k == n and not holds and c > 0][-1]
        if measured:
            assert 0.5 * np.median(measured) <= estimates[n] <= 2.0 * np.median(measured), (n, estimates[n], measured)
        else:
            assert estimates[n] >= 0.5 * max(processed), (n, estimates[n], processed)
    # A second slot adds capacity: the estimate at two slots is above what one slot was measured processing at its
    # limit (saturated), or at the most it was seen processing. Not against the last estimate at one slot: that one
    # comes from the calmer phase after the scale-in, on a machine whose contention moves a slot's rate by tens of
    # percent (one CI run: 7,526 there, from 5,200 rows/s at a busy share of 0.69, against 7,000 at two slots).
    at_limit = [m for k, _, m, behind, holds in rows if k == 1 and behind and not holds] or \
        [m for k, c, m, _, holds in rows if k == 1 and not holds and c > 0]
    assert estimates[2] > max(at_limit), (estimates, at_limit)
