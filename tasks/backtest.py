"""The backtest on Spark: a job's (or the fleet's) history read from the lake with the pipeline's reader, validated
by the metric-quality suite first, then replayed (sim/backtest.py) on the driver for one job or inside the executors
for the fleet (`applyInPandas`, one job per task), and published for the Prefect UI."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pandas as pd
from prefect import task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from daedalus.connectors.lake import Lake
from daedalus.connectors.replay import (
    ACTUAL,
    RESULT_SCHEMA,
    InsufficientHistory,
    check_policies,
    pareto_png,
    replay,
    replay_group,
)
from daedalus.connectors.spark import SparkSettings, read_lake, session
from daedalus.connectors.store import Store
from daedalus.models.errors import ValidationError
from daedalus.models.expectations import ValidationReport
from daedalus.models.text import number
from daedalus.tasks.artifacts import artifact_key
from daedalus.tasks.validate import validate

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

HISTORY_COLUMNS = ("job", "worker", "timestamp", "workload", "throughput", "cpu", "lag", "scaleout")


@dataclass(frozen=True)
class FleetBacktest:
    """Each job's report, and each job refused with why (validation, too short, too flat); `cpu_s`: each replayed
    job's CPU seconds in its executor, per phase (rebuilding the history and fitting capacity, then each policy)."""

    reports: dict[str, dict[str, Any]] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)
    cpu_s: dict[str, dict[str, float]] = field(default_factory=dict)


def require_job(lake: Lake, job: str) -> None:
    """A job the lake does not hold is named with the jobs it does hold."""
    held = lake.jobs()
    if job not in held:
        listed = ", ".join(held[:10]) + (" …" if len(held) > 10 else "") if held else "none"
        raise ValidationError(f"the lake {lake.url} holds no history of job {job!r}; it holds: {listed}")


def extent(lake: Lake, jobs: list[str] | None = None) -> tuple[float, float]:
    """The first and last second of these jobs' history, from the lake's file names."""
    files = [f for f in lake.files(jobs) if f.first is not None and f.last is not None]
    if not files:
        raise ValidationError(f"the lake {lake.url} holds no history{' of ' + ', '.join(jobs) if jobs else ''}")
    return min(f.first for f in files if f.first is not None), max(f.last for f in files if f.last is not None)


def learned_downtimes(store_url: str | None, job: str) -> tuple[float, float] | None:
    """The job's downtimes (out, in) where its knowledge learned them from observed recoveries; else None."""
    if store_url is None:
        return None
    knowledge = Store(store_url).job(job).load().knowledge
    if knowledge is None or knowledge.downtime.observations == 0:
        return None
    return knowledge.downtime.out_s, knowledge.downtime.in_s


def require_valid(report: ValidationReport, job: str | None = None) -> None:
    """Refuse a window the metric-quality suite failed (or found empty), naming the checks and their row counts."""
    if report.empty:
        raise ValidationError(report.empty_reason())
    verdict = report.jobs.get(job) if job is not None else None
    if job is not None and verdict is None:
        raise ValidationError(f"metric validation found no rows of job {job!r} in the window")
    if verdict is not None and not verdict.passed:
        raise ValidationError(f"job {job!r}: metric validation of the window failed: {verdict.reason()}")


def _rows(read_rows: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    return read_rows.filter(F.col("schema_error").isNull()).select(*HISTORY_COLUMNS)


def backtest_job(lake: Lake, job: str, names: list[str], since: float | None = None, until: float | None = None,
                 max_scaleout: int | None = None, downtimes: tuple[float, float] | None = None,
                 spark_settings: SparkSettings | None = None, seed: int = 0,
                 on_phase: Callable[[str], None] | None = None) -> dict[str, Any]:
    """One job: validate its window, read it with Spark, replay the policies here (on the driver). `on_phase` hears
    each step ("validating", "reading", then each policy's name) as it starts."""
    say = on_phase or (lambda phase: None)
    check_policies(names)
    require_job(lake, job)
    first, last = extent(lake, [job])
    since, until = first if since is None else since, last if until is None else until
    say("validating")
    require_valid(validate(lake, since, until, spark_settings=spark_settings, jobs=[job]), job)
    say("reading")
    spark = session(spark_settings)
    rows = _rows(read_lake(spark, lake, since, until, [job]).rows).toPandas()
    return replay(job, rows, names, max_scaleout, downtimes, seed, on_policy=say)


def _replay_each(names: tuple[str, ...], seed: int) -> Any:
    """The function applyInPandas runs on each job's rows (a closure: Spark reads its type hints, not a partial's)."""

    def replay_job(rows: pd.DataFrame) -> pd.DataFrame:
        return replay_group(rows, names, seed)

    return replay_job


def one_job_per_task(rows: DataFrame, jobs: list[str], spark: Any) -> DataFrame:
    """The rows with a `slot` key per job, hash-partitioned on it into one partition per job: each of Spark's tasks
    replays exactly one job, and a core that finishes takes the next job. Hashing the job names themselves puts
    several jobs in one task and leaves others empty (10 jobs in 16 partitions: tasks of 0 to 3 jobs), so a core can
    finish its share while the other still has two or three jobs to go. The keys are the smallest integers that
    Spark's own partition hash (pmod of murmur3, as `repartition` uses) sends to partitions 0 … n−1."""
    from pyspark.sql import functions as F

    n = len(jobs)
    keys = (spark.range(0, 64 * n).select("id", F.expr(f"pmod(hash(id), {n})").alias("p"))
            .groupBy("p").agg(F.min("id").alias("id")).collect())
    by_partition = {int(r["p"]): int(r["id"]) for r in keys}
    if len(by_partition) < n:  # 64 draws per partition: missing one has probability about e^-64
        raise RuntimeError(f"found keys for {len(by_partition)} of {n} partitions")
    slot = F.create_map(*[F.lit(x) for i, job in enumerate(jobs) for x in (job, by_partition[i])])
    return rows.withColumn("slot", slot[F.col("job")].cast("bigint")).repartition(n, "slot")


def backtest_fleet(lake: Lake, names: list[str], since: float | None = None, until: float | None = None,
                   spark_settings: SparkSettings | None = None, seed: int = 0) -> FleetBacktest:
    """Every job of the lake's window in parallel on Spark, one job per task; jobs that fail validation are refused
    with the checks they failed and are not replayed."""
    from pyspark.sql import functions as F

    check_policies(names)
    first, last = extent(lake)
    since, until = first if since is None else since, last if until is None else until
    report = validate(lake, since, until, spark_settings=spark_settings)
    require_valid(report)
    refused = {job: f"metric validation failed: {v.reason()}" for job, v in report.jobs.items() if not v.passed}
    spark = session(spark_settings)
    jobs = sorted(job for job in report.jobs if job not in refused)
    if not jobs:
        return FleetBacktest({}, dict(sorted(refused.items())))
    rows = _rows(read_lake(spark, lake, since, until).rows).filter(F.col("job").isin(jobs))
    out = (one_job_per_task(rows, jobs, spark).groupBy("slot", "job")
           .applyInPandas(_replay_each(tuple(names), seed), RESULT_SCHEMA).collect())
    reports, cpu = {}, {}
    for row in sorted(out, key=lambda r: r["job"]):
        cpu[row["job"]] = json.loads(row["cpu_s"])
        if row["error"] is not None:
            refused[row["job"]] = row["error"]
        else:
            reports[row["job"]] = json.loads(row["report"])
    return FleetBacktest(reports, dict(sorted(refused.items())), cpu)


# ---------------------------------------------------------------------- tables


def rows_of(report: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per policy and one for what actually ran, with worker-hours as a share of the actual."""
    actual = report["actual"]["worker_hours"]
    rows = []
    for name, p in {ACTUAL: report["actual"], **report["policies"]}.items():
        rows.append({"job": report["job"], "policy": name, "worker_hours": p["worker_hours"],
                     "pct_of_actual": 100.0 * p["worker_hours"] / actual if actual else None,
                     "seconds_over_slo": p["seconds_over_slo"], "rescales": p["rescales"],
                     "latency_p95_s": p["latency_p95_s"]})
    return rows


def markdown_table(rows: list[dict[str, Any]]) -> str:
    lines = ["| job | policy | worker-hours | % of actual | s over SLO | rescales | p95 latency |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        pct = "—" if r["pct_of_actual"] is None else f"{r['pct_of_actual']:.1f} %"
        lines.append(f"| {r['job']} | {r['policy']} | {number(r['worker_hours'], digits=1)} | {pct} | "
                     f"{number(r['seconds_over_slo'])} | {number(r['rescales'])} | "
                     f"{number(r['latency_p95_s'], 's')} |")
    return "\n".join(lines)


def capacity_markdown(report: dict[str, Any]) -> str:
    """The fitted capacity per scale-out (the replayed job's) and whether it was observed or extrapolated."""
    lines = ["| scale-out | fitted capacity /s | |", "|---:|---:|---|"]
    for c in report["capacity"]["per_scaleout"]:
        seen = "observed" if c["observed"] else "extrapolated"
        lines.append(f"| {c['scaleout']} | {number(c['fitted'])} | {seen} |")
    return "\n".join(lines)


def job_markdown(report: dict[str, Any], png: bytes) -> str:
    never = report["capacity"]["never_observed"]
    d = report["downtime_s"]
    return "\n".join([
        f"# Backtest of {report['job']}", "",
        f"{report['window']['start']} – {report['window']['end']}; maximum scale-out {report['max_scaleout']}; "
        f"latency SLO {report['slo_s']:g} s; downtimes {d['out']:g} s out, {d['in']:g} s in ({d['source']}). "
        "The actual run's latency is estimated from the consumer lag (lag ÷ arrival rate).", "",
        markdown_table(rows_of(report)), "",
        f"![worker-hours against p95 latency](data:image/png;base64,{base64.b64encode(png).decode()})", "",
        "## Capacity per scale-out, fitted on the history", "",
        "Never observed (extrapolated): " + (", ".join(map(str, never)) if never else "none") + ".", "",
        capacity_markdown(report)])


@task(name="publish-backtest", cache_policy=NO_CACHE)
def publish(report: dict[str, Any]) -> None:
    """The job's table, Pareto plot and fitted capacities as one Markdown artifact (`backtest-<job>`)."""
    create_markdown_artifact(key=artifact_key("backtest", report["job"]),
                             markdown=job_markdown(report, pareto_png(report)),
                             description=f"Backtest of {report['job']}: worker-hours and latency per policy")


@task(name="backtest-job", cache_policy=NO_CACHE)
def backtest_job_task(lake_url: str, job: str, names: list[str], since: float | None, until: float | None,
                      store_url: str | None = None, max_scaleout: int | None = None,
                      spark_settings: SparkSettings | None = None) -> dict[str, Any]:
    return backtest_job(Lake(lake_url), job, names, since, until, max_scaleout, learned_downtimes(store_url, job),
                        spark_settings)


__all__ = ["FleetBacktest", "InsufficientHistory", "backtest_fleet", "backtest_job", "backtest_job_task", "extent",
           "learned_downtimes", "markdown_table", "publish", "require_job", "rows_of"]
