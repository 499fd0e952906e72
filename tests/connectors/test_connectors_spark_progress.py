"""The progress listener a user adds to their Spark job (runtime/spark_progress.py), fed progress events by hand, and
its stop on request (the spark-submit target's), fed query statuses by hand.

The events carry the fields and shapes a real Spark 4.3 query reports: offsets as JSON text (Kafka's
`{"topic": {"partition": offset}}`, a file source's `{"logOffset": n}`), `durationMs` with `triggerExecution`,
`latestOffset` None for a source that does not report it, the start time as ISO 8601 text.
"""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

from prometheus_client import generate_latest

from daedalus.runtime.spark_progress import ProgressExporter, StopOnRequest, local_slots, topic_backlog


def _source(end: str | None, latest: str | None) -> SimpleNamespace:
    return SimpleNamespace(endOffset=end, latestOffset=latest)


def _progress(rows: int, batch_ms: int, *sources: SimpleNamespace, name: str | None = "orders",
              timestamp: str = "2026-11-26T19:00:01.250Z") -> SimpleNamespace:
    return SimpleNamespace(progress=SimpleNamespace(id="3f1c", name=name, batchId=7, numInputRows=rows,
                                                    timestamp=timestamp, sources=list(sources),
                                                    durationMs={"triggerExecution": batch_ms, "addBatch": 1}))


def _samples(exporter: ProgressExporter) -> dict[str, float]:
    text = generate_latest(exporter.registry).decode()
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
            if line and not line.startswith("#") and "_created" not in line}


def test_backlog_is_latest_minus_end_summed_over_partitions_per_topic():
    kafka = _source('{"orders": {"0": 100, "1": 40}, "refunds": {"0": 7}}',
                    '{"orders": {"0": 130, "1": 45}, "refunds": {"0": 7}}')
    assert topic_backlog([kafka]) == {"orders": 35, "refunds": 0}
    # Sources without Kafka's shape, or without a latest offset, say nothing: no made-up zero.
    assert topic_backlog([_source('{"logOffset": 4}', '{"logOffset": 9}'), _source('{"orders": {"0": 3}}', None)]) == {}
    # A partition absent from the end offsets has no known start (Kafka's earliest offset moves with retention): not
    # counted; a latest offset behind the end (a source that reports it late) counts 0, not negative.
    assert topic_backlog([_source('{"t": {"0": 10}}', '{"t": {"0": 8, "1": 5}}')]) == {"t": 0}


def test_each_event_adds_its_rows_and_batch_time_and_sets_the_backlog():
    exporter = ProgressExporter(lambda: ["1", "2"])
    exporter.onQueryStarted(SimpleNamespace(id="3f1c", runId="r1", name="orders", timestamp="2026-11-26T19:00:00.500Z"))
    kafka = ('{"orders": {"0": 1000, "1": 900}}', '{"orders": {"0": 1250, "1": 900}}')
    exporter.onQueryProgress(_progress(1900, 800, _source(*kafka)))
    exporter.onQueryProgress(_progress(600, 450, _source('{"orders": {"0": 1300, "1": 1200}}',
                                                         '{"orders": {"0": 1320, "1": 1210}}'),
                                       timestamp="2026-11-26T19:00:02.050Z"))
    got = _samples(exporter)
    assert got['spark_streaming_input_rows_total{query="orders"}'] == 2500
    assert got['spark_streaming_batch_seconds_total{query="orders"}'] == 1.25
    assert got['spark_streaming_source_backlog_rows{query="orders",topic="orders"}'] == 30
    start = 1795719600.5  # date -u -d 2026-11-26T19:00:00Z +%s, and the half second
    # The backlog is as of the start of the batch that reported it: its trigger's start, not the event's arrival.
    assert got['spark_streaming_source_backlog_time_seconds{query="orders"}'] == start + 1.55
    assert got['spark_streaming_query_start_time_seconds{query="orders"}'] == start
    assert got['spark_streaming_executor_up{executor="1",query="orders"}'] == 1
    assert got['spark_streaming_executor_up{executor="2",query="orders"}'] == 1


def test_idle_means_no_backlog_and_workers_follow_the_executors():
    executors = ["1", "2"]
    exporter = ProgressExporter(lambda: list(executors))
    exporter.onQueryProgress(_progress(10, 5, _source('{"orders": {"0": 1}}', '{"orders": {"0": 9}}'), name=None))
    assert _samples(exporter)['spark_streaming_source_backlog_rows{query="3f1c",topic="orders"}'] == 8  # id: no name
    executors.remove("1")
    exporter.onQueryIdle(SimpleNamespace(id="3f1c", runId="r1", timestamp="2026-11-26T19:00:09Z"))
    got = _samples(exporter)
    assert got['spark_streaming_source_backlog_rows{query="3f1c",topic="orders"}'] == 0
    assert got['spark_streaming_source_backlog_time_seconds{query="3f1c"}'] == 1795719609  # idle since then
    assert 'spark_streaming_executor_up{executor="1",query="3f1c"}' not in got  # its series ends
    assert got['spark_streaming_executor_up{executor="2",query="3f1c"}'] == 1


def test_a_source_without_kafkas_offsets_leaves_the_backlog_and_its_age_to_the_job():
    exporter = ProgressExporter(lambda: ["1"])
    exporter.onQueryProgress(_progress(10, 5, _source('{"logOffset": 4}', '{"logOffset": 9}')))
    exporter.onQueryIdle(SimpleNamespace(id="3f1c", runId="r1", timestamp="2026-11-26T19:00:09Z"))
    got = _samples(exporter)
    assert got['spark_streaming_input_rows_total{query="orders"}'] == 10
    assert not any(k.startswith("spark_streaming_source_backlog") for k in got)  # the demo writes its own


def test_local_mode_counts_the_task_slots_of_its_master():
    assert [local_slots(m) for m in ("local", "local[3]", "local[2,4]", "local[*]")] == [1, 3, 2, os.cpu_count()]
    # Not local mode: the executors are the workers (Spark's ids).
    assert [local_slots(m) for m in ("local-cluster[2,1,1024]", "spark://h:7077", "yarn", "k8s://https://k:443")] == [
        None] * 4


class _Query:
    """A query's status as PySpark reports it: trigger active for the first `busy` reads, then waiting."""

    def __init__(self, busy: int) -> None:
        self.name, self.id, self.reads, self.busy, self.stopped_while = "orders", "3f1c", 0, busy, None

    @property
    def status(self) -> dict:
        self.reads += 1
        return {"message": "", "isDataAvailable": True, "isTriggerActive": self.reads <= self.busy}

    def stop(self) -> None:
        self.stopped_while = self.reads <= self.busy  # True: stopped during a micro-batch


def test_a_stop_request_stops_each_query_between_micro_batches_or_after_its_patience(tmp_path, capsys):
    waiting, behind = _Query(busy=3), _Query(busy=10**9)  # the second never pauses between batches
    flag = tmp_path / "stop"
    watcher = StopOnRequest(SimpleNamespace(streams=SimpleNamespace(active=[waiting, behind])), flag, patience_s=0.05,
                            poll_s=0.01)
    watcher.start()
    assert waiting.stopped_while is None and watcher.is_alive()  # nothing until asked
    flag.write_text("")
    watcher.join(timeout=10)
    assert waiting.stopped_while is False and behind.stopped_while is True
    err = capsys.readouterr().err
    assert "stopped query orders between micro-batches" in err and "during a micro-batch, after 0.05 s" in err


def test_the_target_folder_hears_of_each_micro_batch(tmp_path):
    exporter = ProgressExporter(lambda: ["slot-0"])
    exporter.onQueryProgress(_progress(10, 5, name="orders"))
    assert not (tmp_path / "running.json").exists()  # not started by a spark-submit target: no file
    exporter.control = tmp_path
    exporter.onQueryProgress(_progress(10, 5, name="orders"))
    assert json.loads((tmp_path / "running.json").read_text())["query"] == "orders"
