"""Validate the lake's recent history: Great Expectations 1.x on Spark DataFrames, a verdict per job.

The suite (models/expectations.py) runs once over the whole fleet's window, on two frames: the rows and the
per-job steps derived here. Great Expectations decides which checks failed and how many rows broke each.
Only for a failed check, one Spark aggregation splits its unexpected rows by job and picks a few example
rows per job, by the same condition the expectation tests. A clean fleet (the usual case) costs one suite run.
An empty window runs no suite: it is reported with the lake's newest row, never passed as clean.

An operator's release of a quarantine is posted by connectors/answers.py (`post_release`).
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from prefect import task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE

from daedalus.connectors.answers import quarantined
from daedalus.connectors.lake import Lake
from daedalus.connectors.spark import SparkSettings, by_job, read_lake, session
from daedalus.connectors.store import Store
from daedalus.models.expectations import (
    STEP_COLUMNS,
    Check,
    CheckResult,
    Failure,
    JobVerdict,
    SuiteSettings,
    ValidationReport,
    checks,
)
from daedalus.tasks.artifacts import artifact_key

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

EXAMPLES_PER_JOB = 3
_KEYS = {"rows": ["job", "worker", "timestamp"], "steps": ["job", "timestamp"]}


def step_frame(rows: DataFrame, settings: SuiteSettings) -> DataFrame:
    """One row per job and second: workers reporting, duplicates, totals, missing steps before it, supply ratio,
    and the workers expected: the scale-out, or null while a rescale settles.

    `rows` should be partitioned by job (`daedalus.connectors.spark.by_job`): then both aggregations and the windows
    run inside the partitions, without another shuffle. A duplicated row of a worker counts once in the
    totals (it fails `unique_rows` on its own). A rescale settles from the second the scale-out changed (a job's
    first second counts as one: its workers are starting) until the workers match it, for at most
    `transition_s`; after that a mismatch is a defect again.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    per_worker = rows.groupBy("job", "timestamp", "worker").agg(
        F.count(F.lit(1)).alias("copies"),
        *(F.max(c).alias(c) for c in ("throughput", "workload", "lag", "scaleout")),
    )
    steps = per_worker.groupBy("job", "timestamp").agg(
        F.count(F.lit(1)).alias("workers"),
        (F.sum("copies") - F.count(F.lit(1))).alias("duplicate_rows"),
        F.max("scaleout").alias("scaleout"),
        F.sum("throughput").alias("throughput"),
        F.max("workload").alias("workload"),
        F.max("lag").alias("lag"),
    )
    by_job = Window.partitionBy("job").orderBy("timestamp")
    seconds = F.unix_micros(F.col("timestamp")) / 1e6
    missing = (seconds - F.lag(seconds).over(by_job)) / settings.step_s - 1
    previous_lag = F.lag("lag").over(by_job)
    drained = F.greatest(previous_lag - F.col("lag"), F.lit(0.0))
    known = F.col("workload").isNotNull() & F.col("lag").isNotNull() & previous_lag.isNotNull()
    ratio = F.when(known, F.col("throughput") / F.greatest(F.col("workload") + drained, F.lit(1.0)))
    changed = ~F.col("scaleout").eqNullSafe(F.lag("scaleout").over(by_job))
    steps = steps.select("*", missing.alias("missing_steps"), ratio.alias("supply_ratio"), changed.alias("_changed"))
    so_far = by_job.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    changed_at = F.max(F.when(F.col("_changed"), seconds)).over(so_far)
    matched_at = F.max(F.when(F.col("workers") == F.col("scaleout"), seconds)).over(so_far)
    settling = F.coalesce(matched_at < changed_at, F.lit(True)) & (seconds - changed_at < settings.transition_s)
    expected = F.when(F.coalesce(settling, F.lit(False)), None).otherwise(F.col("scaleout"))
    return steps.select(*(expected.alias(c) if c == "expected_workers" else c for c in STEP_COLUMNS))


@functools.cache
def _validators(settings: SuiteSettings) -> dict[str, Any]:
    """Great Expectations objects for this suite: an ephemeral context, one validation per frame (cached)."""
    import great_expectations as gx
    import great_expectations.expectations as gxe
    from great_expectations.data_context.types.base import ProgressBarsConfig

    # The INFO line of every ephemeral context (a temporary docs site) is not news to an operator; that module sets
    # its own logger to INFO when imported, so it is quieted by name, after the import.
    logging.getLogger("great_expectations.data_context.types.base").setLevel(logging.WARNING)
    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    source = context.data_sources.add_spark(name="daedalus-lake")
    out = {}
    for frame in ("rows", "steps"):
        suite = context.suites.add(gx.ExpectationSuite(name=f"metrics-{frame}"))
        for check in checks(settings):
            if check.frame == frame:
                suite.add_expectation(getattr(gxe, check.expectation)(**check.kwargs, meta={"check": check.name}))
        batch = source.add_dataframe_asset(name=frame).add_batch_definition_whole_dataframe(f"{frame}-all")
        out[frame] = context.validation_definitions.add(
            gx.ValidationDefinition(name=f"metrics-{frame}", data=batch, suite=suite))
    return out


def run_suite(frames: Mapping[str, DataFrame], settings: SuiteSettings) -> dict[str, bool]:
    """Run the suite over each frame: success per check name (BOOLEAN_ONLY: no rows are collected here)."""
    success: dict[str, bool] = {}
    for frame, definition in _validators(settings).items():
        outcome = definition.run(batch_parameters={"dataframe": frames[frame]}, result_format="BOOLEAN_ONLY")
        for r in outcome.results:
            name = r.expectation_config.meta["check"]
            if r.exception_info and r.exception_info.get("raised_exception"):
                raise RuntimeError(f"check {name} could not run: {r.exception_info.get('exception_message')}")
            success[name] = bool(r.success)
    return success


def violation(check: Check, frame: DataFrame) -> Column | None:
    """The rows a check's expectation calls unexpected, as a Spark condition (None: a table-level check)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    k = check.kwargs
    if check.expectation == "ExpectColumnValuesToBeNull":
        return F.col(k["column"]).isNotNull()
    if check.expectation == "ExpectColumnValuesToNotBeNull":
        return F.col(k["column"]).isNull()
    if check.expectation == "ExpectColumnValuesToBeBetween":
        column, parts = F.col(k["column"]), []
        if k.get("min_value") is not None:
            parts.append(column < F.lit(k["min_value"]))
        if k.get("max_value") is not None:
            parts.append(column > F.lit(k["max_value"]))
        return F.coalesce(functools.reduce(lambda a, b: a | b, parts), F.lit(False))
    if check.expectation == "ExpectColumnPairValuesToBeEqual":
        return F.coalesce(F.col(k["column_A"]) != F.col(k["column_B"]), F.lit(False))
    if check.expectation == "ExpectCompoundColumnsToBeUnique":
        return F.count(F.lit(1)).over(Window.partitionBy(*k["column_list"])) > 1
    if check.expectation == "ExpectTableColumnsToMatchSet":
        return None
    raise ValueError(f"check {check.name}: no row condition known for {check.expectation}")


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def split_by_job(frames: Mapping[str, DataFrame], failed: list[Check]) -> dict[str, list[Failure]]:
    """Per job: the failed checks it broke, with counts and a few example rows (oldest first)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    out: dict[str, list[Failure]] = {}
    for frame_name, frame in frames.items():
        mine = [c for c in failed if c.frame == frame_name]
        if not mine:
            continue
        flagged = frame
        for i, check in enumerate(mine):
            condition = violation(check, frame)
            flagged = flagged.withColumn(f"_v{i}", F.lit(True) if condition is None else condition)
        flagged = flagged.filter(functools.reduce(lambda a, b: a | b, [F.col(f"_v{i}") for i in range(len(mine))]))
        counts = flagged.groupBy("job").agg(*(F.sum(F.col(f"_v{i}").cast("long")).alias(f"_v{i}")
                                              for i in range(len(mine)))).collect()
        first = Window.partitionBy("job").orderBy(*_KEYS[frame_name][1:])
        examples: dict[tuple[str, int], list[dict[str, Any]]] = {}
        for i, check in enumerate(mine):
            shown = [c for c in frame.columns if c in (*_KEYS[frame_name], *_columns(check))]
            picked = (flagged.filter(F.col(f"_v{i}")).withColumn("_n", F.row_number().over(first))
                      .filter(F.col("_n") <= EXAMPLES_PER_JOB).select(*shown).collect())
            for row in picked:
                examples.setdefault((row["job"], i), []).append({k: _plain(v) for k, v in row.asDict().items()})
        for row in counts:
            for i, check in enumerate(mine):
                if row[f"_v{i}"]:
                    out.setdefault(row["job"], []).append(
                        Failure(check.name, check.meaning, int(row[f"_v{i}"]),
                                tuple(examples.get((row["job"], i), []))))
    return out


def _columns(check: Check) -> tuple[str, ...]:
    k = check.kwargs
    if "column" in k:
        return (k["column"],)
    if "column_A" in k:
        return (k["column_A"], k["column_B"])
    return tuple(k.get("column_list", ()))


def newest_row(lake: Lake, jobs: list[str] | None = None) -> float | None:
    """Epoch seconds of the lake's newest row (of these jobs; None: no rows), to say where the data is.

    A file's name bounds its rows, so only the newest-named files and the files named otherwise are opened; a
    file that cannot be read counts by its name.
    """
    files = lake.files(jobs)
    latest = max((f.last for f in files if f.last is not None), default=None)
    found: list[float] = []
    for file in (f for f in files if f.last is None or f.last == latest):
        try:
            with lake.fs.open(file.path, "rb") as f:
                value = pc.max(pq.read_table(f, columns=["timestamp"]).column("timestamp")).as_py()
        except (OSError, pa.ArrowException):
            value = None
        if isinstance(value, datetime):
            found.append((value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp())
        elif file.last is not None:
            found.append(file.last)
    return max(found, default=None)


def validate(lake: Lake, since: float, until: float, settings: SuiteSettings | None = None,
             spark_settings: SparkSettings | None = None, jobs: list[str] | None = None) -> ValidationReport:
    """Validate every job's rows with since ≤ timestamp ≤ until; a verdict for each job that has rows there.

    The steps are derived from `transition_s` before the window on, so a rescale that began just before it is
    seen settling, and a mismatch that began long before it is not excused.
    """
    from pyspark.sql import functions as F

    settings = settings or SuiteSettings()
    spark = session(spark_settings)
    read = read_lake(spark, lake, since - settings.transition_s, until, jobs)
    history = by_job(read.rows, spark).cache()
    in_window = F.col("timestamp") >= F.lit(since).cast("timestamp")
    rows = history.filter(in_window)
    steps = step_frame(history, settings).filter(in_window).cache()
    try:
        counts = {r["job"]: int(r["count"]) for r in rows.groupBy("job").count().collect()}
        if not counts and not read.unreadable:
            return ValidationReport(since, until, (), newest_row=newest_row(lake, jobs), only=tuple(jobs or ()))
        frames = {"rows": rows, "steps": steps}
        success = run_suite(frames, settings)
        failures = split_by_job(frames, [c for c in checks(settings) if not success[c.name]])
        broken = [f for job_failures in failures.values() for f in job_failures]
        results = tuple(CheckResult(c.name, c.frame, c.meaning, success[c.name],
                                    sum(f.count for f in broken if f.check == c.name))
                        for c in checks(settings))
        for job, uri, error in read.unreadable:
            failures.setdefault(job, []).append(
                Failure("readable_files", "every lake file can be read", 1, ({"file": uri, "error": error},)))
            counts.setdefault(job, 0)
        verdicts = {job: JobVerdict(job, n, tuple(failures.get(job, ()))) for job, n in sorted(counts.items())}
        return ValidationReport(since, until, results, verdicts)
    finally:
        steps.unpersist()
        history.unpersist()


@task(name="validate-window", cache_policy=NO_CACHE)
def validate_window(lake_url: str, since: float, until: float, settings: SuiteSettings | None = None,
                    spark_settings: SparkSettings | None = None, jobs: list[str] | None = None) -> ValidationReport:
    return validate(Lake(lake_url), since, until, settings, spark_settings, jobs)


@task(name="quarantine-or-release", cache_policy=NO_CACHE, retries=2, retry_delay_seconds=[1, 5])
def quarantine_or_release(store_url: str, report: ValidationReport) -> dict[str, list[str]]:
    """Quarantine every job that failed (its loop holds and says why); release a quarantined job that passed."""
    root = Store(store_url)
    out: dict[str, list[str]] = {"quarantined": [], "released": []}
    stamp = datetime.fromtimestamp(report.until, tz=UTC).strftime("%Y-%m-%d %H:%M:%SZ")
    for job, verdict in report.jobs.items():
        store = root.job(job)
        if not verdict.passed:
            store.post("quarantine", {"reason": f"metric validation of the window ending {stamp} failed: "
                                                     f"{verdict.reason()}"})
            out["quarantined"].append(job)
        elif quarantined(store):
            store.post("release", {})
            out["released"].append(job)
    return out


def job_markdown(verdict: JobVerdict, report: ValidationReport) -> str:
    window = " – ".join(datetime.fromtimestamp(t, tz=UTC).strftime("%Y-%m-%d %H:%M:%SZ")
                        for t in (report.since, report.until))
    lines = [f"# {verdict.job}: metric validation {'passed' if verdict.passed else 'FAILED'}", "",
             f"- window {window}; {verdict.rows:,} rows"]
    for failure in verdict.failures:
        lines += ["", f"## {failure.check}: {failure.count:,} rows", f"Expected: {failure.meaning}.", ""]
        if failure.examples:
            columns = list(failure.examples[0])
            lines += ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
            lines += ["| " + " | ".join(str(e.get(c)) for c in columns) + " |" for e in failure.examples]
    return "\n".join(lines)


@task(name="publish-validation", cache_policy=NO_CACHE)
def publish(report: ValidationReport) -> None:
    """A fleet table (one row per job) and, for each job that failed, its failures with example rows."""
    table = [{"job": job, "passed": v.passed, "rows": v.rows,
              "failed_checks": ", ".join(f"{f.check} ({f.count})" for f in v.failures)}
             for job, v in report.jobs.items()]
    create_table_artifact(key="validation-fleet", table=table,
                          description=f"Metric validation: {len(report.failed_jobs)} of {len(report.jobs)} jobs failed")
    for job in report.failed_jobs:
        verdict = report.jobs[job]
        create_markdown_artifact(key=artifact_key("validation", job), markdown=job_markdown(verdict, report),
                                 description=f"Metric validation of {job}: {verdict.reason()}")
