"""A user's Spark Structured Streaming job, not the demo's: configured as docs/engines.md tells a user to.

`spark-submit --master local[N] spark_user_job.py WORKDIR --rate ROWS_PER_S --metrics-port PORT --start EPOCH
[--seconds S]`

It reads a topic `orders` of two partitions from a Python data source with Kafka's offsets (`{"orders": {"0": n,
"1": m}}`): each partition's log end grows at half the rate from `--start` until the epoch written in
`WORKDIR/closed`, if any (the producer stops); a batch takes at most `maxRowsPerTrigger` rows (admission control, as
Kafka's `maxOffsetsPerTrigger`), and the source reports its latest offset, as Kafka's does. Each row is hashed 100
times (CPU work in the JVM) and written with its order id to a Parquet sink (`WORKDIR/output`, exactly once through
the checkpoint `WORKDIR/checkpoint`). The one line of docs/engines.md publishes its progress for Prometheus.
Independently of that, the source appends to `WORKDIR/commits.jsonl` the time and the offsets of each batch Spark
commits: what the job really processed. The master (and so the scale-out) comes from the submit command, as in a
user's job.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows

from daedalus.runtime.spark_progress import ProgressExporter

PARTITIONS = ("0", "1")


class OrdersReader(DataSourceStreamReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.start, self.rate = float(options["start"]), float(options["rate"])
        self.limit, self.log, self.closed = int(options["maxRowsPerTrigger"]), Path(options["commits"]), \
            Path(options["closed"])

    def _end(self) -> dict:
        now = time.time()
        if self.closed.exists():
            now = min(now, float(self.closed.read_text()))
        n = int((now - self.start) * self.rate / len(PARTITIONS))
        return {"orders": {p: n for p in PARTITIONS}}

    def initialOffset(self) -> dict:
        return {"orders": {p: 0 for p in PARTITIONS}}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.limit)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        end = self._end()["orders"]
        if isinstance(limit, ReadAllAvailable):
            return {"orders": end}
        share = limit.max_rows // len(PARTITIONS)
        return {"orders": {p: min(end[p], start["orders"][p] + share) for p in PARTITIONS}}

    def reportLatestOffset(self) -> dict:
        return self._end()

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        return [InputPartition((p, start["orders"][p], end["orders"][p])) for p in PARTITIONS]

    def read(self, partition: InputPartition):
        p, first, last = partition.value
        for offset in range(first, last):
            yield (f"customer-{offset % 97}", f"order-{p}-{offset:010d}")

    def commit(self, end: dict) -> None:
        with self.log.open("a") as out:
            out.write(json.dumps({"t": time.time(), "end": end}) + "\n")


class Orders(DataSource):
    @classmethod
    def name(cls) -> str:
        return "orders"

    def schema(self) -> str:
        return "customer STRING, payload STRING"

    def streamReader(self, schema) -> OrdersReader:
        return OrdersReader(self.options)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("workdir", type=Path)
    parser.add_argument("--rate", type=float, required=True)
    parser.add_argument("--metrics-port", type=int, required=True)
    parser.add_argument("--seconds", type=float, help="stop after this long (default: when asked to)")
    parser.add_argument("--max-rows", type=int, default=4000)
    parser.add_argument("--start", type=float, required=True, help="when the topic's log started growing")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    spark = SparkSession.builder.appName("orders-by-customer").config("spark.ui.enabled", "false").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(Orders)

    ProgressExporter.install(spark, port=args.metrics_port)  # the one line docs/engines.md asks for

    rounds = F.sequence(F.lit(1), F.lit(100))
    digest = F.aggregate(rounds, F.col("payload"), lambda acc, _: F.sha2(acc, 256))
    orders = (spark.readStream.format("orders").option("start", str(args.start)).option("rate", str(args.rate))
              .option("maxRowsPerTrigger", str(args.max_rows)).option("commits", str(args.workdir / "commits.jsonl"))
              .option("closed", str(args.workdir / "closed")).load())
    query = (orders.select("customer", "payload", digest.alias("digest"))
             .writeStream.format("parquet").queryName("orders").option("path", str(args.workdir / "output"))
             .option("checkpointLocation", str(args.workdir / "checkpoint"))
             .trigger(processingTime="1 second").start())
    query.awaitTermination(args.seconds)
    query.stop()
    spark.stop()


if __name__ == "__main__":
    main()
