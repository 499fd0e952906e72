"""A local Spark Structured Streaming job that Daedalus can watch (Prometheus) and rescale (spark-local).

Run as its own process: `python -m daedalus.runtime.spark_stream WORKDIR --workload FILE --metrics-port PORT`.
In WORKDIR:
- `input/`: a feeder thread writes one JSON-lines file per second, as many rows as the workload trace says
  (one rate per line, tuples/s), each row with a unique increasing `id` — the topic the job reads;
- `output/`, `checkpoint/`: the query's parquet sink and checkpoint (exactly-once file sink);
- `control.json` (written by connectors.spark_local): the wanted parallelism and the decision behind it;
- `state.json` (written here): the running parallelism, the last applied decision, rows fed so far;
- `stop` (written by whoever wants it to end): stop feeding, drain, count the output, exit;
- `result.json`: rows fed, rows in the sink, distinct ids in the sink — written at the end.

The query reads the folder, hashes every row `rounds` times (CPU-bound work in the JVM) and writes parquet.
Its parallelism is the number of partitions each micro-batch is split into (`repartition(n)`), so n task
slots work at once (n ≤ the cores of `local[cores]`). A rescale stops the query and starts it again from
its checkpoint with the new n: the file source and sink's logs make that exactly once.

Metrics (prometheus_client on 127.0.0.1:PORT): the progress listener any job adds (runtime/spark_progress.py), on
the query named `--app`, with the task slots as its workers (`executor="slot-k"`); and two series a Kafka broker and
source would give a real job:
- `kafka_server_brokertopicmetrics_messagesin_total{topic}`: rows fed (the feeder is the broker);
- `spark_streaming_source_backlog_rows{query, topic}`: rows fed but not yet read. A file source's offsets count
  files, not rows, so the listener cannot read a backlog from them; the demo writes it into the listener's series.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, start_http_server

from daedalus.connectors.spark_local import read_json, write_json
from daedalus.runtime.spark_progress import ProgressExporter

SCHEMA = "id LONG, t DOUBLE, payload STRING"


class Feeder(threading.Thread):
    """Writes the workload trace into the input folder, one file per second, on the wall clock."""

    def __init__(self, folder: Path, rates: list[float], fed: Counter) -> None:
        super().__init__(name="spark-feeder", daemon=True)
        self.folder, self.rates, self.fed_metric = folder, rates, fed
        self.fed = 0
        self.stopped = threading.Event()

    def run(self) -> None:
        staging = self.folder.parent / "staging"
        staging.mkdir(exist_ok=True)
        start = time.time()
        carry = 0.0
        for second, rate in enumerate(self.rates):
            if self.stopped.wait(max(0.0, start + second + 1 - time.time())):
                return
            carry += rate
            rows, carry = int(carry), carry - int(carry)
            now = time.time()
            lines = [json.dumps({"id": self.fed + i, "t": now, "payload": f"row-{self.fed + i:012d}"})
                     for i in range(rows)]
            tmp = staging / f"part-{second:06d}.json"
            tmp.write_text("\n".join(lines) + ("\n" if lines else ""))
            os.replace(tmp, self.folder / tmp.name)  # the file source must only see complete files
            self.fed += rows
            self.fed_metric.inc(rows)


class Metrics:
    """The job's metrics: the progress listener's, over its task slots, and the broker's rows fed."""

    def __init__(self, app: str, topic: str, port: int) -> None:
        self.registry = CollectorRegistry()
        self.progress = ProgressExporter(self.slot_names, self.registry)
        self.fed = Counter("kafka_server_brokertopicmetrics_messagesin", "rows fed", ["topic"], registry=self.registry)
        self.app, self.topic = app, topic
        self.fed.labels(topic).inc(0)
        self.server, _ = start_http_server(port, addr="127.0.0.1", registry=self.registry)
        self.slots = 0

    def slot_names(self) -> list[str]:
        return [f"slot-{k}" for k in range(self.slots)]

    def set_backlog(self, rows: int) -> None:
        """The backlog as of now (what was fed minus what the query read)."""
        self.progress.backlog.labels(self.app, self.topic).set(rows)
        self.progress.backlog_time.labels(self.app).set(time.time())


class Job:
    """The streaming query with its rescale-by-restart and its progress metrics."""

    def __init__(self, workdir: Path, rates: list[float], port: int, parallelism: int, cores: int, rounds: int,
                 app: str) -> None:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        from pyspark.sql import SparkSession

        self.workdir, self.cores, self.rounds = workdir, cores, rounds
        for sub in ("input", "output", "checkpoint"):
            (workdir / sub).mkdir(parents=True, exist_ok=True)
        self.metrics = Metrics(app, workdir.name, port)
        self.spark = (SparkSession.builder.master(f"local[{cores}]").appName(app)
                      .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", str(cores))
                      .config("spark.sql.adaptive.enabled", "false").getOrCreate())
        self.spark.sparkContext.setLogLevel("ERROR")
        self.spark.streams.addListener(self.metrics.progress)
        self.feeder = Feeder(workdir / "input", rates, self.metrics.fed.labels(workdir.name))
        self.parallelism, self.decision = parallelism, None
        self.read_total = 0
        self.query: Any = None

    def _start_query(self) -> None:
        from pyspark.sql import functions as F

        # At most two files (two seconds of input) per micro-batch: behind, the job works off its backlog in
        # short batches back to back, as a Kafka consumer would, instead of one ever larger batch.
        df = (self.spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 2).json(str(self.workdir / "input"))
              .repartition(self.parallelism))
        # `rounds` chained sha2 over the payload: a fixed CPU cost per row, spent in the JVM.
        rounds = F.sequence(F.lit(1), F.lit(self.rounds))
        digest = F.aggregate(rounds, F.col("payload"), lambda acc, _: F.sha2(acc, 256))
        self.metrics.slots = self.parallelism
        self.query = (df.select("id", "t", digest.alias("digest")).writeStream.queryName(self.metrics.app)
                      .format("parquet")
                      .option("path", str(self.workdir / "output"))
                      .option("checkpointLocation", str(self.workdir / "checkpoint"))
                      .trigger(processingTime="1 second").start())
        self.started = time.time()
        self._last_batch = -1

    def _publish(self) -> None:
        p = self.query.lastProgress if self.query is not None else None
        if p and p["batchId"] != self._last_batch:
            self._last_batch = p["batchId"]
            self.read_total += int(p["numInputRows"])
        self.metrics.set_backlog(max(self.feeder.fed - self.read_total, 0))

    def _write_state(self) -> None:
        write_json(self.workdir / "state.json", {"parallelism": self.parallelism, "decision": self.decision,
                                                  "running": self.query is not None and self.query.isActive
                                                  and self._last_batch >= 0,
                                                  "started": self.started, "fed": self.feeder.fed,
                                                  "cores": self.cores})

    def _rescale(self, wanted: int, decision: str | None) -> None:
        """Stop the query and start it again from its checkpoint with the new parallelism."""
        self.query.stop()
        self.parallelism, self.decision = wanted, decision
        self._start_query()
        self._write_state()

    def run(self) -> None:
        self._start_query()
        self._write_state()
        self.feeder.start()
        stop = self.workdir / "stop"
        while not stop.exists():
            control = read_json(self.workdir / "control.json")
            if control and control.get("decision") != self.decision and 1 <= int(control["parallelism"]) <= self.cores:
                self._rescale(int(control["parallelism"]), control.get("decision"))
            self._publish()
            self._write_state()
            time.sleep(0.2)
        self.feeder.stopped.set()
        self.feeder.join()
        self._drain()

    def _drain(self) -> None:
        """Let the query read everything fed, then count what the sink committed."""
        self.query.processAllAvailable()
        self.query.stop()
        out = self.spark.read.parquet(str(self.workdir / "output"))  # only files the sink's log committed
        rows = out.count()
        distinct = out.select("id").distinct().count()
        write_json(self.workdir / "result.json", {"fed": self.feeder.fed, "rows_out": rows, "distinct_ids": distinct})
        self.spark.stop()
        self.metrics.server.shutdown()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("workdir", type=Path)
    parser.add_argument("--workload", type=Path, required=True, help="tuples/s, one per line, one line per second")
    parser.add_argument("--metrics-port", type=int, required=True)
    parser.add_argument("--parallelism", type=int, default=1)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=200, help="sha2 rounds per row: the CPU cost of a row")
    parser.add_argument("--app", default="spark-local")
    args = parser.parse_args(argv)
    rates = [float(x) for x in args.workload.read_text().split()]
    Job(args.workdir, rates, args.metrics_port, args.parallelism, args.cores, args.rounds, args.app).run()


if __name__ == "__main__":
    main()
