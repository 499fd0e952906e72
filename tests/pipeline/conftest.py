"""Pipeline fixtures: one local Spark session for the whole test session, and lake builders."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pytest

from daedalus.connectors.lake import SCHEMA, Lake
from tests.helpers import SHORT_JVM

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z


@pytest.fixture(scope="session")
def spark_settings(tmp_path_factory: pytest.TempPathFactory):
    from daedalus.connectors.spark import SparkSettings

    return SparkSettings(master="local[2]", shuffle_partitions=4, driver_memory="1g",
                         conf={"spark.driver.extraJavaOptions": SHORT_JVM},
                         log=str(tmp_path_factory.mktemp("spark") / "spark.log"))


@pytest.fixture(scope="session")
def spark(spark_settings) -> Iterator[object]:
    """Real Spark (local[2]); 7–15 s to start, shared by every pipeline test."""
    from daedalus.connectors.spark import session, stop

    yield session(spark_settings)
    stop()


def rows(job: str, seconds: int, workers: int = 2, workload: float | np.ndarray = 1_000.0, start: float = T0,
         lag: float = 0.0) -> dict[str, np.ndarray]:
    """Sound lake rows as columns: throughput = workload shared evenly, CPU proportional, constant lag."""
    ts = start + 1 + np.arange(seconds, dtype=float)
    w = np.broadcast_to(np.asarray(workload, dtype=float), (seconds,))
    n = seconds * workers
    per_worker = np.repeat(w, workers) / workers
    return {
        "job": np.full(n, job, dtype=object),
        "worker": np.tile(np.array([f"worker-{k}" for k in range(workers)], dtype=object), seconds),
        "timestamp": np.repeat(ts, workers),
        "workload": np.repeat(w, workers),
        "throughput": per_worker,
        "cpu": 0.1 + 0.5 * per_worker / max(per_worker.max(), 1.0),
        "lag": np.full(n, lag),
        "scaleout": np.full(n, workers, dtype=np.int32),
    }


def table(columns: dict[str, np.ndarray]) -> pa.Table:
    data = dict(columns)
    data["timestamp"] = pa.array(np.round(np.asarray(data["timestamp"]) * 1e6).astype("int64")).cast(
        SCHEMA.field("timestamp").type)
    data["worker"] = pa.array(data["worker"], pa.string())
    data["job"] = pa.array(data["job"], pa.string())
    for name in ("workload", "throughput", "cpu", "lag"):
        data[name] = pa.array(np.asarray(data[name], dtype=float), pa.float64(), from_pandas=True)
    return pa.table(data, schema=SCHEMA)


def write(lake: Lake, columns: dict[str, np.ndarray]) -> list[str]:
    return lake.append_table(table(columns))
