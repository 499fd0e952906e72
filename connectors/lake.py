"""The metric-history lake: every loop's raw per-worker metrics as Parquet, partitioned by job and date.

Rows: one per job, worker and second, columns `job` (string), `worker` (string), `timestamp` (UTC,
microseconds), `workload`, `throughput`, `cpu`, `lag` (doubles, NaN stored as null), `scaleout` (int32).
Layout (Hive partitioning, as Spark and pyarrow read it): `<url>/job=<job>/date=<YYYY-MM-DD>/
part-<first>-<last>-<id>.parquet`, where first and last are the epoch seconds of the file's oldest and newest
row, so reads prune files by name. The partition columns are in the path, not in the files.

Atomic appends: each file is written under a hidden temporary name (a leading '.', which Spark and pyarrow
skip) and renamed into place, so a reader sees a whole file or none. One loop writes one file per date it
covers (two only across midnight): all are written first, then renamed.

Compaction merges a partition's small files whose rows are all older than `min_age_s` into one file, drops
duplicate (worker, timestamp) rows (a compaction interrupted between its rename and its deletions leaves
copies, which the next one removes), then deletes the originals. The validation window is younger than
`min_age_s`, so it never races a compaction; readers set Spark's `ignoreMissingFiles` for the rest.

Any filesystem fsspec and pyarrow reach (a local folder by default, `s3://…`, `gs://…`).
"""

from __future__ import annotations

import math
import re
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from daedalus.connectors.store import check_job_name
from daedalus.models.errors import ValidationError
from daedalus.models.types import Observation

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "COLUMNS",
    "COMPACT_MIN_AGE_S",
    "DEFAULT_URL",
    "FILE_SCHEMA",
    "SCHEMA",
    "CompactionReport",
    "Lake",
    "LakeFile",
    "observation_table",
    "schema_problems",
]

DEFAULT_URL = ".daedalus/lake"
# Compaction leaves files younger than this alone: longer than the validation window, so never raced (above).
COMPACT_MIN_AGE_S = 7200.0
SCHEMA = pa.schema(
    [
        ("job", pa.string()),
        ("worker", pa.string()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("workload", pa.float64()),
        ("throughput", pa.float64()),
        ("cpu", pa.float64()),
        ("lag", pa.float64()),
        ("scaleout", pa.int32()),
    ]
)
COLUMNS: tuple[str, ...] = tuple(SCHEMA.names)
FILE_SCHEMA = pa.schema([f for f in SCHEMA if f.name != "job"])  # job lives in the path
_PART = re.compile(r"^part-(\d+)-(\d+)-[0-9a-z]+\.parquet$")
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def observation_table(obs: Observation) -> pa.Table:
    """One loop's observation as lake rows: one per worker and second the worker reported.

    A worker reports at a second when its throughput or CPU is known there; seconds before it existed (NaN
    in both) are not rows. Missing values of a reporting worker stay as nulls, for validation to find.
    """
    ts = np.asarray(obs.timestamps, dtype=float)
    parts: dict[str, list[np.ndarray]] = {name: [] for name in COLUMNS}
    for worker in obs.workers:
        tp = np.asarray(obs.throughput[worker], dtype=float)
        cpu = np.asarray(obs.cpu.get(worker, np.full(ts.size, np.nan)), dtype=float)
        present = np.isfinite(tp) | np.isfinite(cpu)
        n = int(present.sum())
        parts["worker"].append(np.full(n, worker, dtype=object))
        parts["timestamp"].append(ts[present])
        parts["workload"].append(np.asarray(obs.workload, dtype=float)[present])
        parts["throughput"].append(tp[present])
        parts["cpu"].append(cpu[present])
        parts["lag"].append(np.asarray(obs.lag, dtype=float)[present])
    worker = np.concatenate(parts["worker"]) if parts["worker"] else np.array([], dtype=object)
    n = worker.size
    stamps = np.concatenate(parts["timestamp"]) if n else np.array([], dtype=float)
    return pa.table(
        {
            "job": pa.array(np.full(n, obs.job, dtype=object), pa.string()),
            "worker": pa.array(worker, pa.string()),
            "timestamp": pa.array(np.round(stamps * 1e6).astype("int64")).cast(SCHEMA.field("timestamp").type),
            **{
                name: pa.array(np.concatenate(parts[name]) if n else np.array([]), pa.float64(), from_pandas=True)
                for name in ("workload", "throughput", "cpu", "lag")
            },
            "scaleout": pa.array(np.full(n, obs.scaleout, dtype=np.int32), pa.int32()),
        },
        schema=SCHEMA,
    )


def _holds(expected: pa.DataType, actual: pa.DataType) -> bool:
    """Whether a file's column type holds the lake's values: a signed integer of any width for an integer column
    (pandas writes int64), float32 or float64 for a double (Spark reads no half floats)."""
    if pa.types.is_integer(expected):
        return pa.types.is_signed_integer(actual)
    if pa.types.is_floating(expected):
        return pa.types.is_float32(actual) or pa.types.is_float64(actual)
    return actual == expected


def schema_problems(schema: pa.Schema) -> list[str]:
    """What is wrong with a data file's schema against FILE_SCHEMA: missing columns and types that cannot hold
    the values (another integer or float width is the same values, not a problem)."""
    problems = []
    for field in FILE_SCHEMA:
        if field.name not in schema.names:
            problems.append(f"column {field.name} missing")
            continue
        actual = schema.field(field.name).type
        if not _holds(field.type, actual):
            problems.append(f"column {field.name} is {actual}, expected {field.type}")
    return problems


def _as_lake(table: pa.Table) -> pa.Table:
    """A table read from a file without schema problems, in the lake's column types (and order)."""
    names = [f.name for f in FILE_SCHEMA if f.name in table.column_names]
    return table.select(names).cast(pa.schema([FILE_SCHEMA.field(n) for n in names]))


@dataclass(frozen=True)
class LakeFile:
    """One visible data file and what its path says about it."""

    path: str  # as the filesystem names it (no protocol)
    job: str
    date: str
    first: float | None  # epoch seconds of its oldest row (None: a file not written by this lake)
    last: float | None

    def overlaps(self, since: float | None, until: float | None) -> bool:
        if self.first is None or self.last is None:
            return True
        return (since is None or self.last >= since) and (until is None or self.first <= until)


@dataclass(frozen=True)
class CompactionReport:
    partitions: int  # partitions compacted
    files_before: int
    files_after: int
    rows: int
    duplicates_dropped: int


def _date(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, tz=UTC).strftime("%Y-%m-%d")


def _part_name(first: float, last: float) -> str:
    return f"part-{math.floor(first)}-{math.ceil(last)}-{uuid.uuid4().hex[:12]}"


def _dates(since: float | None, until: float | None) -> tuple[str | None, str | None]:
    return (None if since is None else _date(since)), (None if until is None else _date(until))


class Lake:
    """Append, list, read and compact the metric history at `url`."""

    def __init__(self, url: str = DEFAULT_URL) -> None:
        self.url = url.rstrip("/")
        self.fs, self.root = fsspec.core.url_to_fs(self.url)
        self.protocol = self.fs.protocol if isinstance(self.fs.protocol, str) else self.fs.protocol[0]

    def uri(self, path: str) -> str:
        """A path as a URI Spark and pyarrow open (absolute file:// for local folders)."""
        return f"file://{path}" if self.protocol in ("file", "local") else f"{self.protocol}://{path}"

    def _partition(self, job: str, date: str) -> str:
        return f"{self.root}/job={check_job_name(job)}/date={date}"

    # ------------------------------------------------------------------ writing

    def append(self, obs: Observation) -> list[str]:
        """Append one loop's observation; returns the files written (none for an empty observation)."""
        return self.append_table(observation_table(obs))

    def append_table(self, table: pa.Table) -> list[str]:
        """Append rows of SCHEMA (any jobs and dates): one file per (job, date), all renamed at the end."""
        if table.num_rows == 0:
            return []
        table = table.cast(SCHEMA)
        epoch = table.column("timestamp").cast(pa.int64()).to_numpy(zero_copy_only=False) / 1e6
        dates = np.array([_date(t) for t in (epoch.min(), epoch.max())])
        jobs = pc.unique(table.column("job")).to_pylist()
        if len(jobs) == 1 and dates[0] == dates[1]:  # the usual case, one loop of one job: no grouping
            groups = [((jobs[0], dates[0]), np.arange(table.num_rows), epoch)]
        else:
            import pandas as pd  # here, not at the top: the command line imports this module at its start

            frame = pd.DataFrame({"job": table.column("job").to_numpy(zero_copy_only=False), "epoch": epoch})
            frame["date"] = pd.to_datetime(epoch, unit="s", utc=True).strftime("%Y-%m-%d")
            groups = [(key, rows.index.to_numpy(), rows["epoch"].to_numpy())
                      for key, rows in frame.groupby(["job", "date"], sort=True)]
        staged: list[tuple[str, str]] = []
        try:
            for (job, date), index, stamps in groups:
                directory = self._partition(str(job), str(date))
                self.fs.makedirs(directory, exist_ok=True)
                name = _part_name(stamps.min(), stamps.max())
                tmp = f"{directory}/.tmp-{name}.parquet"
                part = table.take(pa.array(index)).drop_columns(["job"])
                with self.fs.open(tmp, "wb") as f:
                    pq.write_table(part, f, compression="snappy")
                staged.append((tmp, f"{directory}/{name}.parquet"))
        except BaseException:
            for tmp, _ in staged:
                self.fs.rm(tmp)
            raise
        for tmp, final in staged:
            self.fs.mv(tmp, final)
        return [final for _, final in staged]

    # ------------------------------------------------------------------ listing

    def jobs(self) -> list[str]:
        if not self.fs.exists(self.root):
            return []
        names = (p.rstrip("/").rsplit("/", 1)[-1] for p in self.fs.ls(self.root, detail=False))
        return sorted(n[len("job="):] for n in names if n.startswith("job="))

    def files(self, jobs: Iterable[str] | None = None, since: float | None = None,
              until: float | None = None) -> list[LakeFile]:
        """Visible data files of these jobs (all if None) that may hold rows in [since, until]."""
        first_date, last_date = _dates(since, until)
        out: list[LakeFile] = []
        for job in sorted(jobs) if jobs is not None else self.jobs():
            job_dir = f"{self.root}/job={check_job_name(job)}"
            if not self.fs.exists(job_dir):
                continue
            for date_dir in sorted(self.fs.ls(job_dir, detail=False)):
                name = date_dir.rstrip("/").rsplit("/", 1)[-1]
                date = name[len("date="):]
                if not name.startswith("date=") or not _DATE.match(date):
                    continue
                if (first_date and date < first_date) or (last_date and date > last_date):
                    continue
                for path in sorted(self.fs.ls(date_dir, detail=False)):
                    base = path.rsplit("/", 1)[-1]
                    if base.startswith((".", "_")) or not base.endswith(".parquet"):
                        continue
                    m = _PART.match(base)
                    file = LakeFile(path, job, date, float(m[1]) if m else None, float(m[2]) if m else None)
                    if file.overlaps(since, until):
                        out.append(file)
        return out

    # ------------------------------------------------------------------ reading (pyarrow, one job at a time)

    def read(self, job: str, since: float | None = None, until: float | None = None,
             columns: Iterable[str] = COLUMNS) -> pd.DataFrame:
        """One job's rows with since ≤ timestamp ≤ until, sorted by timestamp and worker.

        Raises ValidationError naming the file when a file's schema is not the lake's (such rows must
        never reach training); the Spark pipeline reads them anyway and fails them in validation.
        """
        columns = list(columns)
        wanted = [c for c in columns if c != "job"]
        tables = []
        for file in self.files([job], since, until):
            with self.fs.open(file.path, "rb") as f:
                pf = pq.ParquetFile(f)
                problems = schema_problems(pf.schema_arrow)
                if problems:
                    raise ValidationError(
                        f"lake file {self.uri(file.path)} of job {job!r} does not have the lake's schema: "
                        f"{'; '.join(problems)}. Fix or remove the file."
                    )
                tables.append(_as_lake(pf.read(columns=wanted)))
        frame = (pa.concat_tables(tables) if tables else FILE_SCHEMA.empty_table().select(wanted)).to_pandas()
        if "timestamp" in frame:
            stamps = frame["timestamp"].astype("int64") / 1e6
            keep = np.ones(len(frame), dtype=bool)
            if since is not None:
                keep &= np.asarray(stamps >= since)
            if until is not None:
                keep &= np.asarray(stamps <= until)
            frame = frame[keep].sort_values([c for c in ("timestamp", "worker") if c in frame])
        if "job" in columns:
            frame.insert(0, "job", job)
        return frame[columns].reset_index(drop=True)

    # ------------------------------------------------------------------ compaction

    def compact(self, jobs: Iterable[str] | None = None, min_age_s: float = COMPACT_MIN_AGE_S,
                now: float | None = None, min_files: int = 2) -> CompactionReport:
        """Merge each partition's files whose rows are all older than `min_age_s` into one file."""
        now = time.time() if now is None else now
        by_partition: dict[tuple[str, str], list[LakeFile]] = {}
        for file in self.files(jobs):
            if file.last is not None and file.last <= now - min_age_s:
                by_partition.setdefault((file.job, file.date), []).append(file)
        partitions = before = after = rows = dropped = 0
        for (job, date), files in sorted(by_partition.items()):
            if len(files) < min_files:
                continue
            tables, merged_paths = [], []
            for file in files:
                with self.fs.open(file.path, "rb") as f:
                    pf = pq.ParquetFile(f)
                    if schema_problems(pf.schema_arrow):
                        continue  # a foreign file stays as it is, for validation to report
                    tables.append(_as_lake(pf.read()))
                merged_paths.append(file.path)
            if len(tables) < min_files:
                continue
            merged = pa.concat_tables(tables).cast(FILE_SCHEMA)
            frame = merged.to_pandas()
            frame["_order"] = np.arange(len(frame))
            unique = frame.drop_duplicates(["worker", "timestamp"], keep="last").sort_values(["timestamp", "worker"])
            table = merged.take(pa.array(unique["_order"].to_numpy()))
            epoch = table.column("timestamp").cast(pa.int64()).to_numpy() / 1e6
            directory = self._partition(job, date)
            name = _part_name(epoch.min(), epoch.max())
            tmp = f"{directory}/.tmp-{name}.parquet"
            with self.fs.open(tmp, "wb") as f:
                pq.write_table(table, f, compression="snappy")
            self.fs.mv(tmp, f"{directory}/{name}.parquet")
            for path in merged_paths:
                self.fs.rm(path)
            partitions += 1
            before += len(merged_paths)
            after += 1
            rows += table.num_rows
            dropped += len(frame) - len(unique)
        return CompactionReport(partitions, before, after, rows, dropped)
