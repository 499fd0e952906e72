"""The metric-history lake: rows of an observation, atomic appends, partitions, reads, compaction (no Spark)."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest

from daedalus.connectors.lake import COLUMNS, FILE_SCHEMA, Lake, observation_table, schema_problems
from daedalus.models.errors import ValidationError
from daedalus.models.types import Observation
from tests.pipeline.conftest import T0, rows, write


def _observation(n: int = 5) -> Observation:
    ts = T0 + np.arange(1, n + 1, dtype=float)
    late = np.array([np.nan, np.nan, 3.0, 3.0, 3.0])[:n]  # worker-2 joins at the third second
    return Observation(job="ads", timestamps=ts, workload=np.full(n, 9.0),
                       throughput={"worker-0": np.full(n, 3.0), "worker-1": np.array([3, np.nan, 3, 3, 3.0]),
                                   "worker-2": late},
                       cpu={"worker-0": np.full(n, 0.5), "worker-1": np.full(n, 0.5),
                            "worker-2": np.where(np.isnan(late), np.nan, 0.4)},
                       lag=np.zeros(n), uptime_s=np.full(n, 100.0), scaleout=3)


def test_observation_rows_one_per_reporting_worker_and_second() -> None:
    t = observation_table(_observation())
    assert t.schema.names == list(COLUMNS)
    # worker-0: 5 rows, worker-1: 5 rows (one with a null throughput), worker-2: 3 rows (not there before).
    assert t.num_rows == 13
    frame = t.to_pandas()
    assert frame.groupby("worker").size().to_dict() == {"worker-0": 5, "worker-1": 5, "worker-2": 3}
    assert frame["throughput"].isna().sum() == 1  # NaN is stored as null, for validation to find
    assert (frame["timestamp"].astype("int64") / 1e6).min() == T0 + 1


def test_append_is_partitioned_and_leaves_no_temporary_files(tmp_path) -> None:
    lake = Lake(str(tmp_path / "lake"))
    written = lake.append(_observation())
    assert len(written) == 1
    assert written[0].startswith(f"{tmp_path}/lake/job=ads/date=2026-01-01/part-{int(T0) + 1}-{int(T0) + 5}-")
    everything = [p.name for p in (tmp_path / "lake").rglob("*") if p.is_file()]
    assert not [name for name in everything if name.startswith(".")]
    assert pq.read_schema(written[0]) == FILE_SCHEMA  # the job lives in the path only
    back = lake.read("ads")
    assert list(back.columns) == list(COLUMNS) and len(back) == 13 and set(back["job"]) == {"ads"}
    assert lake.read("nobody", since=T0).empty


def test_a_loop_across_midnight_writes_one_file_per_date(tmp_path) -> None:
    lake = Lake(str(tmp_path / "lake"))
    written = write(lake, rows("ads", 10, start=T0 + 86_400 - 5))
    assert sorted(p.split("/date=")[1][:10] for p in written) == ["2026-01-01", "2026-01-02"]
    assert [f.date for f in lake.files()] == ["2026-01-01", "2026-01-02"]
    assert len(lake.read("ads", since=T0 + 86_400)) == 2 * 6  # rows stamped from midnight on


def test_files_are_pruned_by_time_from_their_names(tmp_path) -> None:
    lake = Lake(str(tmp_path / "lake"))
    for k in range(3):
        write(lake, rows("ads", 60, start=T0 + 60 * k))
    assert len(lake.files(["ads"])) == 3
    assert len(lake.files(["ads"], since=T0 + 125)) == 1
    assert len(lake.files(["ads"], since=T0 + 60, until=T0 + 61)) == 2


def test_compaction_merges_old_files_drops_duplicates_and_keeps_recent_ones(tmp_path) -> None:
    lake = Lake(str(tmp_path / "lake"))
    for k in range(4):
        write(lake, rows("ads", 60, start=T0 + 60 * k))
    write(lake, rows("ads", 60, start=T0 + 60))  # an append written twice
    write(lake, rows("ads", 60, start=T0 + 3600))  # recent: stays as it is
    report = lake.compact(min_age_s=1800, now=T0 + 3660)
    assert (report.partitions, report.files_before, report.files_after) == (1, 5, 1)
    assert report.duplicates_dropped == 120 and report.rows == 4 * 120
    assert len(lake.files()) == 2
    merged = lake.read("ads")
    assert len(merged) == 5 * 120 and not merged.duplicated(["worker", "timestamp"]).any()


def test_reading_a_foreign_file_names_the_file_and_the_problem(tmp_path) -> None:
    lake = Lake(str(tmp_path / "lake"))
    path = write(lake, rows("ads", 10))[0]
    t = pq.read_table(path).drop_columns(["lag"])
    pq.write_table(t, path)
    assert schema_problems(t.schema) == ["column lag missing"]
    with pytest.raises(ValidationError, match=r"column lag missing.*Fix or remove the file"):
        lake.read("ads")


def test_integer_and_float_columns_of_any_width_are_the_lake_s(tmp_path) -> None:
    """A file pandas writes stores the scale-out as int64 (and an exporter may write float32): the same values,
    so no schema error; reads and compaction hand them on in the lake's types."""
    import pandas as pd
    import pyarrow as pa

    lake = Lake(str(tmp_path / "lake"))
    write(lake, rows("ads", 10))
    frame = pd.DataFrame({k: v for k, v in rows("ads", 10, start=T0 + 10).items() if k != "job"})
    frame["timestamp"] = pd.to_datetime(frame["timestamp"], unit="s", utc=True).astype("datetime64[us, UTC]")
    frame["scaleout"] = frame["scaleout"].astype("int64")
    frame["cpu"] = frame["cpu"].astype("float32")
    path = tmp_path / "lake" / "job=ads" / "date=2026-01-01" / f"part-{int(T0) + 11}-{int(T0) + 20}-pandas.parquet"
    frame.to_parquet(path, index=False)
    written = pq.read_schema(path)
    assert (written.field("scaleout").type, written.field("cpu").type) == (pa.int64(), pa.float32())
    assert schema_problems(written) == []
    for narrow in (pa.int8(), pa.int16()):
        assert schema_problems(FILE_SCHEMA.set(FILE_SCHEMA.get_field_index("scaleout"),
                                               pa.field("scaleout", narrow))) == []
    assert schema_problems(FILE_SCHEMA.set(FILE_SCHEMA.get_field_index("scaleout"), pa.field("scaleout", pa.string()))
                           ) == ["column scaleout is string, expected int32"]
    # Half floats are no Parquet type Spark reads: still a schema error.
    assert schema_problems(FILE_SCHEMA.set(FILE_SCHEMA.get_field_index("cpu"), pa.field("cpu", pa.float16()))
                           ) == ["column cpu is halffloat, expected double"]
    back = lake.read("ads")
    assert len(back) == 40 and back["scaleout"].dtype == "int32" and (back["scaleout"] == 2).all()
    assert lake.compact(min_age_s=0, now=T0 + 3600).files_after == 1
    (merged,) = lake.files(["ads"])
    assert pq.read_schema(merged.path) == FILE_SCHEMA and len(lake.read("ads")) == 40
