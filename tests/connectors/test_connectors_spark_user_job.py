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
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from connectors_support import needs_prometheus
from prometheus_client import CollectorRegistry, Counter, start_http_server

from daedalus.cli import observe
from daedalus.runtime.ports import free_port
from daedalus.runtime.prometheus import local_prometheus
from tests.cli.cli_support import flat, tiny_app

pytestmark = [needs_prometheus, pytest.mark.slow]

JOB = Path(__file__).with_name("spark_user_job.py")
RATE, MAX_ROWS, WINDOW = 6000.0, 4000, 20
run = tiny_app(observe.observe)


def _broker(port: int, start: float, stop: threading.Event) -> None:
    """Messages in on `orders`: the topic's log end, as a broker's JMX exporter would publish it."""
    registry = CollectorRegistry()
    messages = Counter("kafka_server_brokertopicmetrics_messagesin", "messages in", ["topic"], registry=registry)
    server, _ = start_http_server(port, addr="127.0.0.1", registry=registry)
    counted = 0
    while not stop.wait(0.25):
        end = 2 * int((time.time() - start) * RATE / 2)  # both partitions, as the source computes them
        messages.labels("orders").inc(end - counted)
        counted = end
    server.shutdown()


def _committed(commits: list[dict], t: float) -> float:
    """Rows the job had committed at time t (linear between commits)."""
    times = [c["t"] for c in commits]
    rows = [sum(c["end"]["orders"].values()) for c in commits]
    return float(np.interp(t, times, rows))


def test_a_users_spark_job_is_observed_with_no_hold_and_the_right_numbers(tmp_path):
    job_port, broker_port = free_port(), free_port()
    start, stop = time.time(), threading.Event()
    broker = threading.Thread(target=_broker, args=(broker_port, start, stop), daemon=True)
    broker.start()
    log = (tmp_path / "job.log").open("w")
    job = subprocess.Popen([sys.executable, str(JOB), str(tmp_path / "job"), "--rate", str(RATE), "--start",
                            str(start), "--metrics-port", str(job_port), "--max-rows", str(MAX_ROWS),
                            "--seconds", "150"], stdout=log, stderr=subprocess.STDOUT)
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
            commits = tmp_path / "job" / "commits.jsonl"
            deadline = time.monotonic() + 240
            while not commits.exists() or len(commits.read_text().splitlines()) < 40:
                assert job.poll() is None and time.monotonic() < deadline, (tmp_path / "job.log").read_text()[-3000:]
                time.sleep(1)
            at = float(int(time.time()) - 2)  # the newest scrape is in
            out = tmp_path / "seen.json"
            result = run("observe", "orders-by-customer", "--jobs-file", jobs, "--json", out, "--window", WINDOW,
                         "--at", at)
    finally:
        job.terminate()
        job.wait(timeout=60)
        stop.set()
        broker.join(timeout=10)
        log.close()
    assert result.exit_code == 0, result.output
    seen = json.loads(out.read_text())
    print(flat(result.output))
    assert seen["holds"] == [] and "No hold" in flat(result.output)
    assert seen["scaleout"] == 1 and list(seen["workers"]) == ["driver"]  # local mode: the driver is the executor
    assert np.mean(seen["workload"]) == pytest.approx(RATE, rel=0.05)

    done = [json.loads(line) for line in commits.read_text().splitlines()]
    t = np.array(seen["timestamps"])
    processed = (_committed(done, t[-1]) - _committed(done, t[0] - 4)) / (t[-1] - t[0] + 4)  # over the rate windows
    throughput = np.nanmean(seen["workers"]["driver"]["throughput"])
    assert throughput == pytest.approx(processed, rel=0.2)
    assert throughput < 0.9 * RATE  # it falls behind: at most MAX_ROWS a batch
    # The backlog: the topic's log end minus what was committed, as the source reported it after the last batch
    # (a batch later than the commit log's line at most: one second of arrivals).
    behind = 2 * int((t[-1] - start) * RATE / 2) - _committed(done, t[-1])
    assert seen["lag"][-1] == pytest.approx(behind, abs=RATE * 2)
    assert seen["lag"][-1] > seen["lag"][0] > 0  # growing
    busy = np.array(seen["workers"]["driver"]["cpu"])
    assert np.all((busy > 0) & (busy <= 1))
    assert seen["uptime_s"][-1] == pytest.approx(t[-1] - start, abs=30)  # the query started after the JVM's start-up
