"""A Spark Structured Streaming job's progress for Prometheus: the one line a user adds to their own job.

    from daedalus.runtime.spark_progress import ProgressExporter; ProgressExporter.install(spark, port=9108)

Why a listener and not Spark's own metrics: with `spark.sql.streaming.metricsEnabled=true` Spark 4 publishes, per
query, `inputRate-total`, `processingRate-total`, `latency`, `eventTime-watermark`, `states-rowsTotal` and
`states-usedBytes` (MetricsReporter in spark-sql 4.3): figures of the last micro-batch, no backlog and no busy
time. The capacity model needs both, and every query's progress event carries them: rows read, the batch's
duration, and for each source its end offset and, for sources that report it (Kafka, any source with admission
control), its latest offset. This listener turns each event into series that Prometheus can rate:

- `spark_streaming_input_rows_total{query}`: the sum of each batch's `numInputRows`; its rate is the rows read per
  wall-clock second (Spark's own rows-per-second figures are per batch, not per second of wall time);
- `spark_streaming_batch_seconds_total{query}`: the sum of each batch's `triggerExecution` time; its rate is the
  share of wall time the query spends in micro-batches, the busy share, 1 exactly when batches run back to back;
- `spark_streaming_source_backlog_rows{query, topic}`: for each topic of a source whose offsets are
  `{topic: {partition: offset}}` (Kafka's shape), the sum over partitions of latest − end offset after the batch;
  0 when the query is idle (no new data);
- `spark_streaming_source_backlog_time_seconds{query}`: when that backlog was read, the start of the batch that
  reported it (a batch learns its latest offset when it is planned, and reports it when it ends): the backlog's age,
  so the loop adds what arrived since (connectors/promql.py) instead of a figure a whole batch old;
- `spark_streaming_query_start_time_seconds{query}`: when the running query started;
- `spark_streaming_executor_up{query, executor}`: 1 per worker of the query, by default its executors, or in local
  mode its task slots (`slot-0` … `slot-{n-1}` on `local[n]`: the cores are what `local[n]` scales); a job whose
  workers are something else (the demo's partitions) passes `workers`.

`query` is the query's name (`.queryName(...)`), or its id when it has none. Counters live as long as the driver:
a query restarted from its checkpoint in the same driver keeps counting.

Started by the `spark-submit` scale target (connectors/spark_submit.py), the driver finds the target's folder in
`DAEDALUS_SPARK_CONTROL`: the exporter then notes each completed micro-batch there (`running.json`) and, when the
scaler asks (`stop`), stops every active query, between two micro-batches when it can (`StopOnRequest`), so the
job's `awaitTermination()` returns and the driver exits.
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server
from pyspark.sql.streaming import StreamingQueryListener

from daedalus.connectors.spark_local import write_json
from daedalus.connectors.spark_submit import CONTROL_ENV, RUNNING, STOP

Workers = Callable[[], Sequence[str]]


def topic_backlog(sources: Iterable[Any]) -> dict[str, int]:
    """Rows behind the latest offset per topic, over the sources whose offsets have Kafka's shape.

    >>> class S: endOffset, latestOffset = '{"orders": {"0": 10, "1": 5}}', '{"orders": {"0": 13, "1": 9}}'
    >>> topic_backlog([S()])
    {'orders': 7}
    """
    behind: dict[str, int] = {}
    for source in sources:
        end, latest = _offsets(source.endOffset), _offsets(source.latestOffset)
        for topic, partitions in latest.items():
            done = end.get(topic, {})
            behind[topic] = behind.get(topic, 0) + sum(max(n - done.get(p, n), 0) for p, n in partitions.items())
    return behind


def _offsets(text: str | None) -> dict[str, dict[str, int]]:
    """`{topic: {partition: offset}}`, or nothing for offsets of another shape (a file source's log offset)."""
    try:
        value = json.loads(text) if text else None
    except ValueError:
        return {}
    if not isinstance(value, Mapping):
        return {}
    return {str(t): {str(p): int(n) for p, n in parts.items()} for t, parts in value.items()
            if isinstance(parts, Mapping) and parts
            and all(isinstance(n, int) and not isinstance(n, bool) for n in parts.values())}


def _epoch(timestamp: str) -> float:
    """Seconds since the epoch of Spark's ISO 8601 event time (`2026-11-26T19:00:00.500Z`; Python 3.11 reads the Z)."""
    return datetime.fromisoformat(timestamp).timestamp()


_LOCAL = re.compile(r"local(?:\[(\d+|\*)(?:,\d+)?\])?")


def local_slots(master: str) -> int | None:
    """Task slots of a local master (`local` 1, `local[n]` and `local[n,retries]` n, `local[*]` the cores), else None.

    >>> [local_slots(m) for m in ("local", "local[3]", "local[2,4]", "local-cluster[2,1,1024]", "spark://h:7077")]
    [1, 3, 2, None, None]
    """
    m = _LOCAL.fullmatch(master)
    if m is None:
        return None
    n = m.group(1) or "1"
    return (os.cpu_count() or 1) if n == "*" else int(n)


def executors(spark: Any) -> Workers:
    """The executors of the application (Spark's ids, the driver excluded), or the task slots in local mode."""
    context = spark.sparkContext
    slots = local_slots(context.master)
    if slots is not None:
        return lambda: [f"slot-{k}" for k in range(slots)]

    def ids() -> list[str]:
        seq = context._jsc.sc().getExecutorIds()
        return [str(seq.apply(i)) for i in range(seq.size())]

    return ids


class ProgressExporter(StreamingQueryListener):
    """Publishes every query's progress events as the series above, on its own registry."""

    def __init__(self, workers: Workers, registry: CollectorRegistry | None = None) -> None:
        self.registry = r = registry or CollectorRegistry()
        self.workers = workers
        self.rows = Counter("spark_streaming_input_rows", "rows the query read", ["query"], registry=r)
        self.busy = Counter("spark_streaming_batch_seconds", "seconds the query spent in micro-batches", ["query"],
                            registry=r)
        self.backlog = Gauge("spark_streaming_source_backlog_rows", "rows of the topic behind its latest offset",
                             ["query", "topic"], registry=r)
        self.backlog_time = Gauge("spark_streaming_source_backlog_time_seconds", "when the backlog was read",
                                  ["query"], registry=r)
        self.started = Gauge("spark_streaming_query_start_time_seconds", "start of the running query", ["query"],
                             registry=r)
        self.up = Gauge("spark_streaming_executor_up", "1 per worker of the query", ["query", "executor"],
                        registry=r)
        self.control: Path | None = None  # the spark-submit target's folder, when it started this driver
        self._names: dict[str, str] = {}  # query id → its name in the labels
        self._workers: dict[str, set[str]] = {}
        self._topics: dict[str, set[str]] = {}

    @classmethod
    def install(cls, spark: Any, port: int, addr: str = "0.0.0.0", workers: Workers | None = None) -> ProgressExporter:
        """Serve the series on http://addr:port/metrics and listen to every query of `spark`."""
        exporter = cls(workers or executors(spark))
        exporter.server, _ = start_http_server(port, addr=addr, registry=exporter.registry)
        spark.streams.addListener(exporter)
        if folder := os.environ.get(CONTROL_ENV):
            exporter.control = Path(folder)
            StopOnRequest(spark, exporter.control / STOP).start()
        return exporter

    def _name(self, query_id: Any, name: str | None) -> str:
        return self._names.setdefault(str(query_id), name or str(query_id))

    def _refresh_workers(self, query: str) -> None:
        now = set(self.workers())
        for gone in self._workers.get(query, set()) - now:
            self.up.remove(query, gone)
        for worker in now:
            self.up.labels(query, worker).set(1)
        self._workers[query] = now

    def _set_backlog(self, query: str, backlog: Mapping[str, int], read_at: str) -> None:
        topics = self._topics.get(query, set()) | set(backlog)
        for topic in topics:
            self.backlog.labels(query, topic).set(backlog.get(topic, 0))
        if topics:  # a query with no backlog of its own (a file source's) leaves both series to whoever sets them
            self.backlog_time.labels(query).set(_epoch(read_at))
        self._topics[query] = topics

    def onQueryStarted(self, event: Any) -> None:
        query = self._name(event.id, event.name)
        self.started.labels(query).set(_epoch(event.timestamp))
        self.rows.labels(query).inc(0)
        self.busy.labels(query).inc(0)
        self._refresh_workers(query)

    def onQueryProgress(self, event: Any) -> None:
        progress = event.progress
        query = self._name(progress.id, progress.name)
        self.rows.labels(query).inc(max(int(progress.numInputRows), 0))
        self.busy.labels(query).inc(max(int(progress.durationMs.get("triggerExecution", 0)), 0) / 1000)
        self._set_backlog(query, topic_backlog(progress.sources), progress.timestamp)
        self._refresh_workers(query)
        if self.control is not None:
            write_json(self.control / RUNNING, {"query": query, "batch": int(progress.batchId), "at": time.time()})

    def onQueryIdle(self, event: Any) -> None:
        query = self._name(event.id, None)
        self._set_backlog(query, {}, event.timestamp)
        self._refresh_workers(query)

    def onQueryTerminated(self, event: Any) -> None:
        """Nothing to do: a query restarted in the same driver keeps its series; a stopped driver's go stale."""


class StopOnRequest(threading.Thread):
    """Stops every active query between two micro-batches once `flag` exists (the spark-submit scaler's request).

    Spark has no "stop after this batch": `StreamingQuery.stop()` interrupts a running batch, which is safe (the batch
    runs again from the checkpoint's offset log) but wasted. So each query is stopped once it reports no trigger
    active, waiting at most `patience_s`, after which it is stopped anyway: a query that runs its batches back to
    back (behind its input) has no pause between them, and waiting longer only lengthens the downtime.
    """

    def __init__(self, spark: Any, flag: Path, patience_s: float = 10.0, poll_s: float = 0.25) -> None:
        super().__init__(name="daedalus-stop-on-request", daemon=True)
        self.spark, self.flag, self.patience_s, self.poll_s = spark, flag, patience_s, poll_s

    def run(self) -> None:
        while not self.flag.exists():
            time.sleep(self.poll_s)
        for query in self.spark.streams.active:
            began = time.monotonic()
            while query.status["isTriggerActive"] and time.monotonic() - began < self.patience_s:
                time.sleep(0.005)
            between = not query.status["isTriggerActive"]
            query.stop()
            how = "between micro-batches" if between else f"during a micro-batch, after {self.patience_s:g} s"
            print(f"daedalus: stopped query {query.name or query.id} {how} on request ({self.flag})", file=sys.stderr,
                  flush=True)
