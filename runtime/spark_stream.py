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

Metrics (prometheus_client on 127.0.0.1:PORT, labels `app` and for slots `pod`), from each progress event:
- `spark_streaming_input_rows_total`: rows the query read (the sum of each batch's `numInputRows`): its
  rate is the throughput per wall-clock second;
- `spark_streaming_input_rows_per_second`, `spark_streaming_processed_rows_per_second`: Spark's own
  progress figures, per batch (rows per second between trigger starts; rows per second of batch duration) —
  a micro-batch figure, not a rate per wall-clock second, so the monitor uses the counter above;
- `spark_streaming_source_offsets_behind_latest`: rows fed but not yet read;
- `spark_streaming_query_start_time_seconds`: when the running query started (the job's uptime);
- `java_lang_operatingsystem_processcpuload{pod="slot-k"}`: per task slot, the JVM's CPU (cores used over
  the last 5 s, from /proc) divided by n;
- `spark_streaming_trigger_busy_ratio{pod="slot-k"}`: the share of the last 5 s in which a micro-batch was
  running (sampled every 0.2 s). It reaches 1 exactly when the job saturates, even when other processes
  take part of the cores — which CPU per slot does not (see docs/connectors.md);
- `kafka_server_brokertopicmetrics_messagesin_total{topic}`: rows fed (the feeder is the broker).
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

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from daedalus.connectors.spark_local import read_json, write_json

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
    """The job's metrics, updated from each progress event."""

    def __init__(self, app: str, topic: str, port: int) -> None:
        self.registry = CollectorRegistry()
        r, labels = self.registry, ["app"]
        self.read = Counter("spark_streaming_input_rows", "rows read by the query", labels, registry=r)
        self.input = Gauge("spark_streaming_input_rows_per_second", "rows read per second", labels, registry=r)
        self.processed = Gauge("spark_streaming_processed_rows_per_second", "rows per second of batch time", labels,
                               registry=r)
        self.behind = Gauge("spark_streaming_source_offsets_behind_latest", "rows fed, not yet read", labels,
                            registry=r)
        self.started = Gauge("spark_streaming_query_start_time_seconds", "start of the running query", labels,
                             registry=r)
        self.cpu = Gauge("java_lang_operatingsystem_processcpuload", "CPU per task slot", ["app", "pod"], registry=r)
        self.busy = Gauge("spark_streaming_trigger_busy_ratio", "share of time in a micro-batch", ["app", "pod"],
                          registry=r)
        self.fed = Counter("kafka_server_brokertopicmetrics_messagesin", "rows fed", ["topic"], registry=r)
        self.app, self.topic = app, topic
        self.fed.labels(topic).inc(0)
        self.read.labels(app).inc(0)
        self.server, _ = start_http_server(port, addr="127.0.0.1", registry=r)
        self.slots = 0

    def set_slots(self, n: int) -> None:
        for k in range(n, self.slots):  # a gone slot's series end (Prometheus writes staleness markers)
            self.cpu.remove(self.app, f"slot-{k}")
            self.busy.remove(self.app, f"slot-{k}")
        self.slots = n


class CpuMeter:
    """Cores the JVM used over the last `window_s`, from /proc/PID/stat (utime + stime)."""

    def __init__(self, pid: int, window_s: float = 5.0) -> None:
        self.path = Path(f"/proc/{pid}/stat")
        self.tick = os.sysconf("SC_CLK_TCK")
        self.window_s = window_s
        self.readings = [self._read()]

    def _read(self) -> tuple[float, float]:
        fields = self.path.read_text().rsplit(")", 1)[1].split()
        return time.monotonic(), (int(fields[11]) + int(fields[12])) / self.tick

    def cores(self) -> float:
        now = self._read()
        self.readings = [r for r in self.readings if r[0] >= now[0] - self.window_s] + [now]
        (t0, c0), (t1, c1) = self.readings[0], now
        return (c1 - c0) / (t1 - t0) if t1 > t0 else 0.0


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
        self.cpu = CpuMeter(self.spark.sparkContext._jvm.ProcessHandle.current().pid())
        self.feeder = Feeder(workdir / "input", rates, self.metrics.fed.labels(workdir.name))
        self.parallelism, self.decision = parallelism, None
        self.read_total = 0
        self.query: Any = None
        self._busy: list[tuple[float, bool]] = []

    def _start_query(self) -> None:
        from pyspark.sql import functions as F

        # At most two files (two seconds of input) per micro-batch: behind, the job works off its backlog in
        # short batches back to back, as a Kafka consumer would, instead of one ever larger batch.
        df = (self.spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 2).json(str(self.workdir / "input"))
              .repartition(self.parallelism))
        # `rounds` chained sha2 over the payload: a fixed CPU cost per row, spent in the JVM.
        rounds = F.sequence(F.lit(1), F.lit(self.rounds))
        digest = F.aggregate(rounds, F.col("payload"), lambda acc, _: F.sha2(acc, 256))
        self.query = (df.select("id", "t", digest.alias("digest")).writeStream.format("parquet")
                      .option("path", str(self.workdir / "output"))
                      .option("checkpointLocation", str(self.workdir / "checkpoint"))
                      .trigger(processingTime="1 second").start())
        self.started = time.time()
        self.metrics.started.labels(self.metrics.app).set(self.started)
        self.metrics.set_slots(self.parallelism)
        self._last_batch = -1

    def _publish(self) -> None:
        app, n = self.metrics.app, self.parallelism
        per_slot = min(self.cpu.cores() / n, 1.0)
        now = time.monotonic()
        self._busy = [b for b in self._busy if b[0] >= now - 5.0] + [(now, bool(self.query.status["isTriggerActive"]))]
        busy = sum(active for _, active in self._busy) / len(self._busy)
        for k in range(n):
            self.metrics.cpu.labels(app, f"slot-{k}").set(per_slot)
            self.metrics.busy.labels(app, f"slot-{k}").set(busy)
        p = self.query.lastProgress if self.query is not None else None
        if p and p["batchId"] != self._last_batch:
            self._last_batch = p["batchId"]
            self.read_total += int(p["numInputRows"])
            self.metrics.read.labels(app).inc(int(p["numInputRows"]))
            self.metrics.input.labels(app).set(float(p.get("inputRowsPerSecond") or 0.0))
            self.metrics.processed.labels(app).set(float(p.get("processedRowsPerSecond") or 0.0))
        self.metrics.behind.labels(app).set(max(self.feeder.fed - self.read_total, 0))

    def _write_state(self) -> None:
        write_json(self.workdir / "state.json", {"parallelism": self.parallelism, "decision": self.decision,
                                                  "running": self.query is not None and self.query.isActive
                                                  and self._last_batch >= 0,
                                                  "started": self.started, "fed": self.feeder.fed,
                                                  "cores": self.cores})

    def _rescale(self, wanted: int, decision: str | None) -> None:
        """Stop the query and start it again from its checkpoint with the new parallelism."""
        self.query.stop()
        app = self.metrics.app
        self.metrics.input.labels(app).set(0.0)
        self.metrics.processed.labels(app).set(0.0)
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
