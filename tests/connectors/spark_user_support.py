"""What the tests of the user's Spark job (spark_user_job.py) share: its submit command, the broker's counter that no
broker publishes here, the job's own record of what it committed, and the rows its sink committed."""

from __future__ import annotations

import json
import shlex
import sys
import threading
import time
from pathlib import Path
from urllib.parse import unquote, urlparse

import numpy as np
import pyarrow.parquet as pq
import pyspark
from prometheus_client import CollectorRegistry, Counter, start_http_server

JOB = Path(__file__).with_name("spark_user_job.py")
SPARK_SUBMIT = Path(sys.executable).with_name("spark-submit")
# pip's spark-submit looks for Spark with the `python3` on the PATH unless SPARK_HOME says where it is, as a user's
# shell would: the loop runs the command in its own environment.
SPARK_HOME = str(Path(pyspark.__file__).parent)


def submit_command(workdir: Path, rate: float, start: float, port: int, max_rows: int, master: str,
                   seconds: float | None = None) -> str:
    """The job's submit command as a user writes it (the master names the scale-out)."""
    args = [str(SPARK_SUBMIT), "--master", master, "--conf", f"spark.pyspark.python={sys.executable}",
            "--conf", f"spark.pyspark.driver.python={sys.executable}", str(JOB), str(workdir), "--rate", f"{rate:g}",
            "--start", repr(start), "--metrics-port", str(port), "--max-rows", str(max_rows)]
    return shlex.join(args + (["--seconds", f"{seconds:g}"] if seconds else []))


def log_end(start: float, rate: float, at: float, closed: float | None = None) -> int:
    """Rows in the topic at `at`: both partitions' log ends, as the job's source computes them."""
    return 2 * int((min(at, closed or at) - start) * rate / 2)


class Broker(threading.Thread):
    """Messages in on `orders`, the topic's log end, as a broker's JMX exporter would publish it."""

    def __init__(self, port: int, start: float, rate: float) -> None:
        super().__init__(name="broker", daemon=True)
        self.port, self.start_at, self.rate = port, start, rate
        self.closed: float | None = None
        self.stopped = threading.Event()

    def run(self) -> None:
        registry = CollectorRegistry()
        messages = Counter("kafka_server_brokertopicmetrics_messagesin", "messages in", ["topic"], registry=registry)
        server, _ = start_http_server(self.port, addr="127.0.0.1", registry=registry)
        counted = 0
        while not self.stopped.wait(0.25):
            end = log_end(self.start_at, self.rate, time.time(), self.closed)
            messages.labels("orders").inc(end - counted)
            counted = end
        server.shutdown()


def commits(workdir: Path) -> list[dict]:
    path = workdir / "commits.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def checkpointed(workdir: Path) -> int:
    """Rows the query has committed, from its checkpoint: the end offsets of the newest batch with a commit file. (The
    source's own log lags one batch: Spark tells a source of a batch's commit when it plans the next one, and an idle
    query plans none.)"""
    done = [int(f.name) for f in (workdir / "checkpoint" / "commits").glob("[0-9]*")]
    if not done:
        return 0
    offsets = (workdir / "checkpoint" / "offsets" / str(max(done))).read_text().splitlines()[-1]
    return sum(json.loads(offsets)["orders"].values())


def batches(workdir: Path) -> list[tuple[float, float, int]]:
    """Per committed batch, from the checkpoint: when the previous one was done (its planning starts then), when it
    was done (its commit file), and its end offset in rows."""
    ck = workdir / "checkpoint"
    out, previous = [], 0.0
    for n in sorted(int(f.name) for f in (ck / "commits").glob("[0-9]*")):
        done = (ck / "commits" / str(n)).stat().st_mtime
        out.append((previous, done, sum(json.loads((ck / "offsets" / str(n)).read_text().splitlines()[-1])["orders"]
                                        .values())))
        previous = done
    return out


def committed(done: list[dict], t: float) -> float:
    """Rows the job had committed at time t (linear between commits)."""
    return float(np.interp(t, [c["t"] for c in done], [sum(c["end"]["orders"].values()) for c in done]))


def sink_orders(output: Path) -> list[str]:
    """The order ids in the files the Parquet sink committed (its `_spark_metadata` log; a batch cut short by a
    stop leaves files that the log never names, and a reader must not count them)."""
    files: set[str] = set()
    for log in (output / "_spark_metadata").iterdir():
        if log.name.startswith("."):
            continue
        for line in log.read_text().splitlines()[1:]:  # the first line is the log's version
            entry = json.loads(line)
            if entry["action"] == "add":
                files.add(unquote(urlparse(entry["path"]).path))
    return [o for f in sorted(files) for o in pq.read_table(f, columns=["payload"]).column("payload").to_pylist()]
