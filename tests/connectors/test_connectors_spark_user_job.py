"""A user's Spark job (tests/connectors/spark_user_job.py, not the demo), configured as docs/engines.md says, seen
by `daedalus observe` through a real Prometheus with the default Spark queries.

The job reads a two-partition topic whose log grows at 6,000 rows/s and takes at most 4,000 rows a micro-batch, one
micro-batch a second: it falls behind by about 2,000 rows/s, so its backlog grows. What it really processed comes
from its source's own commit log (the end offsets of every committed batch), not from the listener: the observed
throughput and backlog are checked against that. The broker's messages-in counter, which no broker publishes here,
is exported by the test from the topic's log end.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import time

import numpy as np
import pytest
from connectors_support import needs_prometheus
from spark_user_support import SPARK_HOME, Broker, batches, commits, committed, log_end, submit_command

from daedalus.cli import observe
from daedalus.runtime.ports import free_port
from daedalus.runtime.prometheus import local_prometheus
from tests.cli.cli_support import flat, tiny_app

pytestmark = [needs_prometheus, pytest.mark.slow]  # a real Spark, but no capacity read: it runs beside other tests

RATE, MAX_ROWS, WINDOW = 6000.0, 4000, 20
run = tiny_app(observe.observe)


def test_a_users_spark_job_is_observed_with_no_hold_and_the_right_numbers(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARK_HOME", SPARK_HOME)
    job_port, broker_port = free_port(), free_port()
    start = time.time()
    broker = Broker(broker_port, start, RATE)
    broker.start()
    log = (tmp_path / "job.log").open("w")
    command = submit_command(tmp_path / "job", RATE, start, job_port, MAX_ROWS, "local[2]", seconds=150)
    job = subprocess.Popen(shlex.split(command), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        with local_prometheus(tmp_path / "prom", [f"127.0.0.1:{job_port}", f"127.0.0.1:{broker_port}"], "1s") as url:
            jobs = tmp_path / "jobs.yaml"
            jobs.write_text(f"""
jobs:
  - name: orders-by-customer
    engine: spark
    prometheus: {{url: "{url}", step: 1s}}
    selector: {{query: orders}}
    source: {{topic: orders}}
    scale_target: {{kind: SparkApplication, namespace: streaming, name: orders-by-customer}}
""")
            deadline = time.monotonic() + 240
            while len(commits(tmp_path / "job")) < 40:
                assert job.poll() is None and time.monotonic() < deadline, (tmp_path / "job.log").read_text()[-3000:]
                time.sleep(1)
            at = float(int(time.time()) - 2)  # the newest scrape is in
            out = tmp_path / "seen.json"
            result = run("observe", "orders-by-customer", "--jobs-file", jobs, "--json", out, "--window", WINDOW,
                         "--at", at)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGTERM)  # spark-submit's JVM and the Python driver it started
        job.wait(timeout=60)
        broker.stopped.set()
        broker.join(timeout=10)
        log.close()
    assert result.exit_code == 0, result.output
    seen = json.loads(out.read_text())
    print(flat(result.output))
    assert seen["holds"] == [] and "No hold" in flat(result.output)
    assert seen["scaleout"] == 2 and sorted(seen["workers"]) == ["slot-0", "slot-1"]  # local[2]: two task slots
    assert np.mean(seen["workload"]) == pytest.approx(RATE, rel=0.05)

    done = commits(tmp_path / "job")
    t = np.array(seen["timestamps"])
    processed = (committed(done, t[-1]) - committed(done, t[0] - 4)) / (t[-1] - t[0] + 4)  # over the rate windows
    throughput = sum(np.nanmean(w["throughput"]) for w in seen["workers"].values())
    assert throughput == pytest.approx(processed, rel=0.2)
    assert throughput < 0.9 * RATE  # it falls behind: at most MAX_ROWS a batch
    # The lag: the source's latest offset, read when Spark planned a batch, minus that batch's end offset, plus what
    # arrived since the batch's trigger started: the rows the topic held at t beyond the end of one of the last batches
    # done by then (the listener hears of a batch a little later), give or take the arrivals between a trigger's start
    # and its planning (under a second) and the workload rate's estimate (2 %). The checkpoint says where each ended.
    recent = [b for b in batches(tmp_path / "job") if b[1] <= t[-1]][-3:]
    waiting = [log_end(start, RATE, t[-1]) - end for _, _, end in recent]
    assert any(-0.02 * w <= seen["lag"][-1] - w <= RATE for w in waiting), (seen["lag"][-1], waiting)
    assert seen["lag"][-1] > seen["lag"][0] > 0  # growing
    busy = np.array([w["cpu"] for w in seen["workers"].values()])
    read = np.array([w["throughput"] for w in seen["workers"].values()])
    assert np.all((busy >= 0) & (busy <= 1)) and np.all(busy[0] == busy[1])  # one query: one busy share
    assert busy.mean() > 0  # it is behind: it runs batch after batch
    # Both counters move only when a micro-batch ends: a window in which none ended (a batch longer than the 4 s
    # window, as on a loaded machine) reads no rows and no busy time together, never one without the other.
    assert np.array_equal(busy == 0, read == 0)
    # The query started after the submit and before its first micro-batch (whose time its checkpoint records); how
    # long the JVM took to start in between depends on the machine.
    first_batch = json.loads((tmp_path / "job" / "checkpoint" / "offsets" / "0").read_text().splitlines()[1])
    assert t[-1] - first_batch["batchTimestampMs"] / 1000 <= seen["uptime_s"][-1] <= t[-1] - start
