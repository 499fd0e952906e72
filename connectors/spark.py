"""The one place for Spark settings and the Spark session of the pipeline flows.

Master URL: `local[N]` by default with N half this machine's cores (at least one), a 1 GB driver and the
process's CPU priority lowered (`nice` 10): the pipeline runs beside the control loops unless its work queue is
served elsewhere, and must leave them a core. A `spark://host:7077` or `k8s://https://…` cluster when the fleet
outgrows one machine (cluster settings such as `spark.kubernetes.container.image` go in `conf`). The environment
overrides the defaults: `DAEDALUS_SPARK_MASTER`, `DAEDALUS_SPARK_DRIVER_MEMORY`, `DAEDALUS_SPARK_SHUFFLE_PARTITIONS`,
`DAEDALUS_SPARK_NICE`, `DAEDALUS_SPARK_LOG`.

Traps handled here (see STACK.md): the Python workers must run this interpreter (`PYSPARK_PYTHON` is set to
`sys.executable` before the session starts); `SPARK_LOCAL_IP=127.0.0.1` for a local master; adaptive
execution would coalesce a small fleet into one partition and one Python worker, so partition coalescing is
off and the pipeline repartitions by job (`by_job`) so the jobs spread over the executors.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from daedalus.connectors.lake import COLUMNS as LAKE_COLUMNS
from daedalus.connectors.lake import FILE_SCHEMA as LAKE_FILE_SCHEMA
from daedalus.connectors.lake import Lake, schema_problems
from daedalus.models.errors import ConfigurationError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["LakeRead", "SparkSettings", "by_job", "read_lake", "session", "stop"]


def local_master() -> str:
    """`local[N]` with half this machine's cores, at least one: `local[*]` took both cores of a two-core machine
    from the control loops beside it (start delays of a minute, loops cancelled)."""
    return f"local[{max(1, (os.cpu_count() or 2) // 2)}]"


@dataclass(frozen=True)
class SparkSettings:
    """Settings of the pipeline's Spark session; each declared once with its default."""

    master: str = field(default_factory=local_master)  # local[N], spark://host:port or k8s://https://host:port
    app_name: str = "daedalus-pipeline"
    driver_memory: str = "1g"  # the driver holds the executors on a local master: enough for a fleet's window
    nice: int = 10  # CPU priority lowered by this much (a local master's JVM and Python workers inherit it); 0: none
    shuffle_partitions: int = 16  # partitions after a shuffle (groupBy job): a few per core
    ui: bool = False  # the Spark UI binds a port; off unless asked for
    conf: Mapping[str, str] = field(default_factory=dict)  # anything else, passed through
    # Where the JVM and its Python workers write their own lines (start-up, warnings): a file, so that they never
    # mix with a command's output; "" leaves them on the terminal.
    log: str = ".daedalus/spark.log"

    def __post_init__(self) -> None:
        if not self.master.startswith(("local", "spark://", "k8s://", "yarn")):
            raise ConfigurationError(
                f"Spark master {self.master!r} is not understood: use local[N], spark://host:port or "
                "k8s://https://host:port"
            )
        if self.shuffle_partitions < 1:
            raise ConfigurationError(f"shuffle_partitions must be ≥ 1, got {self.shuffle_partitions}")

    @property
    def local(self) -> bool:
        return self.master.startswith("local")

    @classmethod
    def from_env(cls, master: str | None = None, **overrides: object) -> SparkSettings:
        """Defaults, then the DAEDALUS_SPARK_* environment, then explicit arguments."""
        env = os.environ
        values: dict[str, object] = {}
        if "DAEDALUS_SPARK_MASTER" in env:
            values["master"] = env["DAEDALUS_SPARK_MASTER"]
        if "DAEDALUS_SPARK_DRIVER_MEMORY" in env:
            values["driver_memory"] = env["DAEDALUS_SPARK_DRIVER_MEMORY"]
        if "DAEDALUS_SPARK_NICE" in env:
            try:
                values["nice"] = int(env["DAEDALUS_SPARK_NICE"])
            except ValueError:
                raise ConfigurationError(f"DAEDALUS_SPARK_NICE must be an integer, got "
                                         f"{env['DAEDALUS_SPARK_NICE']!r}") from None
        if "DAEDALUS_SPARK_SHUFFLE_PARTITIONS" in env:
            try:
                values["shuffle_partitions"] = int(env["DAEDALUS_SPARK_SHUFFLE_PARTITIONS"])
            except ValueError:
                raise ConfigurationError(
                    "DAEDALUS_SPARK_SHUFFLE_PARTITIONS must be an integer, got "
                    f"{env['DAEDALUS_SPARK_SHUFFLE_PARTITIONS']!r}"
                ) from None
        if "DAEDALUS_SPARK_LOG" in env:
            values["log"] = env["DAEDALUS_SPARK_LOG"]
        if master is not None:
            values["master"] = master
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)  # type: ignore[arg-type]

    def spark_conf(self) -> dict[str, str]:
        """Every configuration key the session is built with."""
        conf = {
            "spark.app.name": self.app_name,
            "spark.driver.memory": self.driver_memory,
            "spark.sql.session.timeZone": "UTC",
            "spark.sql.shuffle.partitions": str(self.shuffle_partitions),
            # Adaptive execution off: it would coalesce a small fleet into one partition (one Python worker),
            # and a cached frame it planned hides its partitioning by job, so later aggregations by job
            # would shuffle again.
            "spark.sql.adaptive.enabled": "false",
            "spark.sql.execution.arrow.pyspark.enabled": "true",
            "spark.python.worker.reuse": "true",
            # One BLAS thread per Python worker: a task is one core, and auto-ARIMA on small matrices runs
            # several times slower when BLAS threads fight over the cores.
            "spark.executorEnv.OMP_NUM_THREADS": "1",
            "spark.executorEnv.OPENBLAS_NUM_THREADS": "1",
            "spark.executorEnv.MKL_NUM_THREADS": "1",
            "spark.ui.enabled": str(self.ui).lower(),
            "spark.ui.showConsoleProgress": "false",
            # job=123 stays the string "123"; a file compacted away between listing and reading is skipped.
            "spark.sql.sources.partitionColumnTypeInference.enabled": "false",
            "spark.sql.files.ignoreMissingFiles": "true",
        }
        if self.local:
            # List the lake's files on the driver: a local filesystem answers faster than a listing job.
            conf["spark.sql.sources.parallelPartitionDiscovery.threshold"] = "1000000"
            conf["spark.driver.host"] = "127.0.0.1"
            conf["spark.driver.bindAddress"] = "127.0.0.1"
        conf.update(self.conf)
        return conf


def session(settings: SparkSettings | None = None) -> SparkSession:
    """The process's Spark session with these settings (started once; 7–15 s the first time).

    A running session with another master is stopped first: a master cannot change inside a running
    SparkContext (the benchmark compares local[1] with local[2] this way).
    """
    settings = settings or SparkSettings.from_env()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    if settings.local:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is None and settings.local and settings.nice > 0:
        # Before the JVM starts, so it and its Python workers inherit it: a loop due now gets the CPU first.
        # A pipeline flow run is a process of its own; the priority goes with it when it ends.
        os.nice(settings.nice)
    if active is not None and active.sparkContext.master != settings.master:
        active.stop()
    builder = SparkSession.builder.master(settings.master)
    for key, value in settings.spark_conf().items():
        builder = builder.config(key, value)
    with _output_to(settings.log if SparkSession.getActiveSession() is None else ""):
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


@contextmanager
def _output_to(log: str) -> Iterator[None]:
    """While a JVM starts, the process's standard output and error (descriptors 1 and 2) are `log`: the JVM inherits
    them and keeps writing there; this process gets its own back. "" changes nothing."""
    if not log:
        yield
        return
    Path(log).parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = (os.dup(1), os.dup(2))
    try:
        with open(log, "ab") as f:
            os.dup2(f.fileno(), 1)
            os.dup2(f.fileno(), 2)
        yield
    finally:
        for fd, original in zip((1, 2), saved, strict=True):
            os.dup2(original, fd)
            os.close(original)


def stop() -> None:
    """Stop the process's Spark session, if any."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()


def by_job(df: DataFrame, spark: SparkSession) -> DataFrame:
    """Hash-partition by job so one job's rows stay together and many jobs spread over the executors."""
    return df.repartition(int(spark.conf.get("spark.sql.shuffle.partitions")), "job")


# ---------------------------------------------------------------------- reading the lake


@dataclass(frozen=True)
class LakeRead:
    """The lake's rows in a window as one DataFrame, plus the files that could not be read at all."""

    rows: DataFrame  # the lake's columns + schema_error (null on rows of well-formed files)
    files: int
    unreadable: tuple[tuple[str, str, str], ...] = ()  # (job, file URI, error)


def _spark_type(arrow_type: object) -> str:
    import pyarrow as pa

    if pa.types.is_timestamp(arrow_type):
        return "timestamp"
    if pa.types.is_int32(arrow_type):
        return "int"
    if pa.types.is_floating(arrow_type):
        return "double"
    return "string"


def read_lake(spark: SparkSession, lake: Lake, since: float | None = None, until: float | None = None,
              jobs: list[str] | None = None, columns: tuple[str, ...] = LAKE_COLUMNS) -> LakeRead:
    """Rows with since ≤ timestamp ≤ until of these jobs (all if None), whatever their files look like.

    Every file's footer is checked against the lake's schema (pyarrow, in threads). Well-formed files are
    read in one scan with the lake's schema. A file with missing columns or other types is read on its own:
    missing columns become null, values are cast where they can be (try_cast, else null), and every row
    gets `schema_error` naming the problems and the file, so validation fails those rows by name.
    Double NaN becomes null, so a NaN is caught as a missing value.
    """
    from concurrent.futures import ThreadPoolExecutor

    import pyarrow.parquet as pq
    from pyspark.sql import functions as F

    files = lake.files(jobs, since, until)

    def footer(path: str) -> tuple[list[str] | None, str | None]:
        try:
            with lake.fs.open(path, "rb") as f:
                return schema_problems(pq.ParquetFile(f).schema_arrow), None
        except Exception as exc:  # a corrupt or truncated file: reported, never read
            return None, f"{type(exc).__name__}: {exc}"

    with ThreadPoolExecutor(max_workers=8) as pool:
        footers = list(pool.map(footer, [f.path for f in files]))
    good: list[str] = []
    foreign: dict[tuple[str, ...], list[str]] = {}
    unreadable = []
    for file, (problems, error) in zip(files, footers, strict=True):
        if problems is None:
            unreadable.append((file.job, lake.uri(file.path), str(error)))
        elif problems:
            foreign.setdefault(tuple(problems), []).append(lake.uri(file.path))
        else:
            good.append(lake.uri(file.path))

    kinds = {f.name: _spark_type(f.type) for f in LAKE_FILE_SCHEMA}
    partitions = ", job string, date string"
    schema = ", ".join(f"{name} {kind}" for name, kind in kinds.items()) + partitions
    # A well-formed file may hold its integers at any width (pandas writes int64): Spark widens a narrower column
    # to the type it is asked for but never narrows one, so integers are scanned as bigint and narrowed below.
    scan = ", ".join(f"{name} {'bigint' if kind == 'int' else kind}" for name, kind in kinds.items()) + partitions
    base = lake.uri(lake.root)
    frames = []
    if good:
        frames.append(spark.read.schema(scan).option("basePath", base).parquet(*good)
                      .withColumn("schema_error", F.lit(None).cast("string")))
    for problems, paths in foreign.items():
        raw = spark.read.option("basePath", base).parquet(*paths)
        present = set(raw.columns)
        casts = [
            (F.col(f.name).try_cast(kind) if f.name in present else F.lit(None).cast(kind)).alias(f.name)
            for f, kind in ((f, _spark_type(f.type)) for f in LAKE_FILE_SCHEMA)
        ]
        error = F.concat(F.lit("; ".join(problems) + " in "), F.col("_metadata.file_path"))
        frames.append(raw.select(*casts, F.col("job").cast("string"), F.col("date").cast("string"),
                                 error.alias("schema_error")))
    if not frames:
        frames.append(spark.createDataFrame([], schema).withColumn("schema_error", F.lit(None).cast("string")))
    rows = frames[0]
    for frame in frames[1:]:
        rows = rows.unionByName(frame)
    if since is not None:
        rows = rows.filter(F.col("timestamp") >= F.lit(since).cast("timestamp"))
    if until is not None:
        rows = rows.filter(F.col("timestamp") <= F.lit(until).cast("timestamp"))
    doubles = {"workload", "throughput", "cpu", "lag"}
    rows = rows.select(*[
        (F.when(F.isnan(c), None).otherwise(F.col(c)) if c in doubles
         else F.col(c).try_cast(kinds[c]) if kinds.get(c) == "int" else F.col(c)).alias(c)
        for c in (*columns, "schema_error")
    ])
    return LakeRead(rows, len(files), tuple(unreadable))
