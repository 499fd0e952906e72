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
- `spark_streaming_query_start_time_seconds{query}`: when the running query started;
- `spark_streaming_executor_up{query, executor}`: 1 per worker of the query, by default its executors (`driver`
  alone in local mode); a job whose workers are something else (the demo's task slots) passes `workers`.

`query` is the query's name (`.queryName(...)`), or its id when it has none. Counters live as long as the driver:
a query restarted from its checkpoint in the same driver keeps counting.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server
from pyspark.sql.streaming import StreamingQueryListener

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


def executors(spark: Any) -> Workers:
    """The executors of the application (Spark's ids, the driver excluded), or `driver` alone in local mode."""
    context = spark.sparkContext
    if context.master.startswith("local"):
        return lambda: ["driver"]

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
        self.started = Gauge("spark_streaming_query_start_time_seconds", "start of the running query", ["query"],
                             registry=r)
        self.up = Gauge("spark_streaming_executor_up", "1 per worker of the query", ["query", "executor"],
                        registry=r)
        self._names: dict[str, str] = {}  # query id → its name in the labels
        self._workers: dict[str, set[str]] = {}
        self._topics: dict[str, set[str]] = {}

    @classmethod
    def install(cls, spark: Any, port: int, addr: str = "0.0.0.0", workers: Workers | None = None) -> ProgressExporter:
        """Serve the series on http://addr:port/metrics and listen to every query of `spark`."""
        exporter = cls(workers or executors(spark))
        exporter.server, _ = start_http_server(port, addr=addr, registry=exporter.registry)
        spark.streams.addListener(exporter)
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

    def _set_backlog(self, query: str, backlog: Mapping[str, int]) -> None:
        for topic in self._topics.get(query, set()) | set(backlog):
            self.backlog.labels(query, topic).set(backlog.get(topic, 0))
        self._topics[query] = self._topics.get(query, set()) | set(backlog)

    def onQueryStarted(self, event: Any) -> None:
        query = self._name(event.id, event.name)
        self.started.labels(query).set(datetime.fromisoformat(event.timestamp.replace("Z", "+00:00")).timestamp())
        self.rows.labels(query).inc(0)
        self.busy.labels(query).inc(0)
        self._refresh_workers(query)

    def onQueryProgress(self, event: Any) -> None:
        progress = event.progress
        query = self._name(progress.id, progress.name)
        self.rows.labels(query).inc(max(int(progress.numInputRows), 0))
        self.busy.labels(query).inc(max(int(progress.durationMs.get("triggerExecution", 0)), 0) / 1000)
        self._set_backlog(query, topic_backlog(progress.sources))
        self._refresh_workers(query)

    def onQueryIdle(self, event: Any) -> None:
        query = self._name(event.id, None)
        self._set_backlog(query, {})
        self._refresh_workers(query)

    def onQueryTerminated(self, event: Any) -> None:
        """Nothing to do: a query restarted in the same driver keeps its series; a stopped driver's go stale."""
