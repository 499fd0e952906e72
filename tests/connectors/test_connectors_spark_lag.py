"""A Spark job's lag through a real Prometheus: the backlog a micro-batch reads when it is planned and publishes when
it ends, plus what arrived since (connectors/promql.py), on series backfilled with promtool.

The job runs 5 s micro-batches back to back, each reading everything there is when it is planned (no admission
limit, so the backlog reads 0 at every batch's end); 1,000 rows arrive per second. A batch's 5,000 rows are counted
when it ends, so the 4 s rate of rows read is above the arrivals on most steps while the backlog reads 0: with the
backlog alone the per-step consistency check (models/loop/validation.py) called that inconsistent (the user's Spark
job's end-to-end test held on it). The rows waiting at second t are the backlog read at the start of the last batch
that ended, plus 1,000 rows for every second since that start.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from connectors_support import needs_prometheus

from daedalus.connectors.prometheus import PrometheusSource
from daedalus.connectors.promql import QuerySet
from daedalus.models.loop.validation import validate_observation
from daedalus.runtime.prometheus import local_prometheus

T0 = (int(time.time()) - 7200) // 60 * 60  # two hours ago, on a minute
SINCE, UNTIL = T0 + 60, T0 + 120
BATCH_S, BATCH_ROWS, BACKLOG, RATE = 5, 5000, 0, 1000
LABELS = 'query="orders"'

pytestmark = [needs_prometheus, pytest.mark.slow]


def _openmetrics() -> str:
    """One sample a second: what the listener publishes (runtime/spark_progress.py) and the broker's counter."""
    series: dict[tuple[str, str], list[str]] = {}

    def add(name: str, kind: str, labels: str, value: float, t: int) -> None:
        series.setdefault((name, kind), []).append(f"{name}{{{labels}}} {value:.15g} {t}")

    for t in range(T0, UNTIL + 1):
        ended = (t - T0) // BATCH_S  # batches ended by t; the last one started BATCH_S before the newest end
        add("kafka_server_brokertopicmetrics_messagesin_total", "counter", 'topic="orders"', RATE * (t - T0), t)
        add("spark_streaming_input_rows_total", "counter", LABELS, BATCH_ROWS * ended, t)
        add("spark_streaming_batch_seconds_total", "counter", LABELS, BATCH_S * ended, t)
        add("spark_streaming_query_start_time_seconds", "gauge", LABELS, T0 - 30, t)
        for slot in ("slot-0", "slot-1"):
            add("spark_streaming_executor_up", "gauge", f'{LABELS},executor="{slot}"', 1, t)
        if ended:
            add("spark_streaming_source_backlog_rows", "gauge", f'{LABELS},topic="orders"', BACKLOG, t)
            add("spark_streaming_source_backlog_time_seconds", "gauge", LABELS, T0 + BATCH_S * (ended - 1), t)
    lines = []
    for (name, kind), samples in series.items():
        lines.append(f"# TYPE {name.removesuffix('_total')} {kind}")
        lines += sorted(samples, key=lambda s: (s.split("}")[0], int(s.rsplit(" ", 1)[1])))
    return "\n".join(lines) + "\n# EOF\n"


@pytest.fixture(scope="module")
def prom_url(tmp_path_factory):
    with local_prometheus(tmp_path_factory.mktemp("prom"), openmetrics=_openmetrics()) as url:
        yield url


def _observe(url: str, lag: str | None = None):
    overrides = {"lag": lag} if lag else {}
    queries = QuerySet("orders", "spark", {"query": "orders"}, {"topic": "orders"}, overrides, 4.0, 2.0)
    return PrometheusSource("orders", queries, url, step_s=1).observe("orders", SINCE, UNTIL)


def test_the_lag_is_the_backlog_read_at_the_last_batchs_start_plus_the_arrivals_since(prom_url):
    obs = _observe(prom_url)
    assert obs.holds == () and obs.scaleout == 2
    np.testing.assert_array_equal(obs.timestamps, np.arange(SINCE + 1, UNTIL + 1))
    np.testing.assert_allclose(obs.workload, RATE)
    since_read = BATCH_S + (obs.timestamps - T0) % BATCH_S  # the last ended batch started this long ago
    np.testing.assert_allclose(obs.lag, BACKLOG + RATE * since_read)
    # Each batch's rows within a step of its end, none lost: 12 batches end in the window.
    rows = sum(obs.throughput[w] for w in obs.workers)
    assert rows.max() > 1.05 * RATE and np.sum(rows) == pytest.approx(12 * BATCH_ROWS, rel=0.02)
    assert validate_observation(obs, UNTIL, None, 0, 30) == ()


def test_the_backlog_alone_would_call_the_same_metrics_inconsistent(prom_url):
    obs = _observe(prom_url, lag="sum(spark_streaming_source_backlog_rows{${selector}, topic=${source.topic}})")
    np.testing.assert_allclose(obs.lag, BACKLOG)
    assert any("inconsistent metrics" in r for r in validate_observation(obs, UNTIL, None, 0, 30))


def test_a_window_in_which_no_batch_ended_reads_no_rows_and_no_busy_time_together(prom_url):
    # 5 s batches, a 4 s window: some steps' windows hold no batch's end. Both counters move only at a batch's end,
    # so such a step reads 0 rows and 0 busy time together; a step whose window holds one reads 5 s of batch in under
    # 4 s of samples, clamped to a busy share of 1 (docs/engines.md, "Why the step should span several micro-batches").
    obs = _observe(prom_url)
    rows = sum(obs.throughput[w] for w in obs.workers)
    busy = obs.cpu["slot-0"]
    np.testing.assert_array_equal(busy, obs.cpu["slot-1"])
    assert set(np.unique(busy)) == {0.0, 1.0}
    np.testing.assert_array_equal(busy == 0, rows == 0)
    np.testing.assert_array_equal((busy == 0)[:-BATCH_S], (busy == 0)[BATCH_S:])  # one batch's period
