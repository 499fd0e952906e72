"""The metric-quality suite, declared as plain data, and the verdicts it produces.

Two frames are validated (tasks/validate.py builds them with Spark and runs the suite with Great
Expectations 1.x):

- `rows`: the lake's rows (one per job, worker and second) plus `schema_error`, set on the rows of a file
  whose columns or types are not the lake's;
- `steps`: one row per job and second, derived in Spark: `workers` reporting, `duplicate_rows` (rows beyond
  one per worker), `scaleout`, `expected_workers` (the scale-out, but null while a rescale settles: from the
  second the scale-out changed until the workers match it, at most `transition_s`), total
  `throughput`, `workload`, `lag`, `missing_steps` since the job's previous second, and
  `supply_ratio` = total throughput / max(workload + lag drained, 1), where lag drained =
  max(previous lag − lag, 0): a job cannot process more than arrived plus what it drained from its backlog
  (null, so not judged, where the workload, the lag or the previous second's lag is unknown).

Each check is one Great Expectations expectation (named by its class and keyword arguments) with a stable
name and a sentence for operators. Pure data: no Spark and no Great Expectations import here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from daedalus.models.text import utc

__all__ = [
    "ROW_COLUMNS",
    "STEP_COLUMNS",
    "Check",
    "CheckResult",
    "Failure",
    "JobVerdict",
    "SuiteSettings",
    "ValidationReport",
    "checks",
]

Frame = Literal["rows", "steps"]
_BETWEEN = "ExpectColumnValuesToBeBetween"
ROW_COLUMNS: tuple[str, ...] = ("job", "worker", "timestamp", "workload", "throughput", "cpu", "lag", "scaleout",
                                "schema_error")
STEP_COLUMNS: tuple[str, ...] = ("job", "timestamp", "workers", "duplicate_rows", "scaleout", "expected_workers",
                                 "throughput", "workload", "lag", "missing_steps", "supply_ratio")


@dataclass(frozen=True)
class SuiteSettings:
    """Thresholds of the suite, each declared once."""

    step_s: float = 1.0  # the lake's resolution: one row per worker and second
    max_gap_steps: int = 5  # at most this many missing seconds in a row per job
    throughput_tolerance: float = 0.10  # throughput may exceed workload + lag drained by this fraction (scrape skew)
    # After the scale-out changes, workers stop and start (a restart from a savepoint): until they all report,
    # fewer of them than the scale-out is the rescale, not a defect, for at most this long.
    transition_s: float = 180.0

    def __post_init__(self) -> None:
        if not self.step_s > 0:
            raise ValueError(f"step_s must be positive, got {self.step_s!r}")
        if int(self.max_gap_steps) != self.max_gap_steps or self.max_gap_steps < 0:
            raise ValueError(f"max_gap_steps must be a whole number ≥ 0, got {self.max_gap_steps!r}")
        if not self.throughput_tolerance >= 0:
            raise ValueError(f"throughput_tolerance must be ≥ 0, got {self.throughput_tolerance!r}")
        if not self.transition_s >= 0:
            raise ValueError(f"transition_s must be ≥ 0, got {self.transition_s!r}")


@dataclass(frozen=True)
class Check:
    """One expectation of the suite: `expectation` is a Great Expectations class name, `kwargs` its arguments."""

    name: str
    frame: Frame
    expectation: str
    kwargs: Mapping[str, Any]
    meaning: str


def checks(settings: SuiteSettings | None = None) -> tuple[Check, ...]:
    """The suite: schema, nulls, ranges, duplicates, gaps, worker count, throughput against supply."""
    s = settings or SuiteSettings()
    rows: list[Check] = [
        Check("columns", "rows", "ExpectTableColumnsToMatchSet", {"column_set": list(ROW_COLUMNS), "exact_match": True},
              "the lake has exactly its columns"),
        Check("schema", "rows", "ExpectColumnValuesToBeNull", {"column": "schema_error"},
              "every file has the lake's columns and types"),
    ]
    rows += [
        Check(f"{column}_not_null", "rows", "ExpectColumnValuesToNotBeNull", {"column": column},
              f"{column} is never null")
        for column in ROW_COLUMNS
        if column != "schema_error"
    ]
    rows += [
        Check("cpu_in_range", "rows", _BETWEEN, {"column": "cpu", "min_value": 0.0, "max_value": 1.0},
              "CPU utilization lies within [0, 1]"),
        *(
            Check(f"{column}_non_negative", "rows", _BETWEEN, {"column": column, "min_value": 0.0},
                  f"{column} is not negative")
            for column in ("workload", "throughput", "lag")
        ),
        Check("scaleout_positive", "rows", _BETWEEN, {"column": "scaleout", "min_value": 1},
              "scale-out is at least 1"),
    ]
    steps = [
        Check("unique_rows", "steps", _BETWEEN, {"column": "duplicate_rows", "max_value": 0},
              "one row per job, worker and second"),
        Check("no_gaps", "steps", _BETWEEN,
              {"column": "missing_steps", "max_value": float(s.max_gap_steps)},
              f"no more than {s.max_gap_steps} missing steps of {s.step_s:g} s in a row"),
        Check("workers_match_scaleout", "steps", "ExpectColumnPairValuesToBeEqual",
              {"column_A": "workers", "column_B": "expected_workers", "ignore_row_if": "either_value_is_missing"},
              f"as many workers report as the scale-out says (a rescale may take {s.transition_s:g} s to settle)"),
        Check("throughput_within_supply", "steps", _BETWEEN,
              {"column": "supply_ratio", "max_value": 1.0 + s.throughput_tolerance},
              f"throughput is not above workload plus lag drained (+{100 * s.throughput_tolerance:g} %)"),
    ]
    return (*rows, *steps)


@dataclass(frozen=True)
class CheckResult:
    """A check's outcome over the whole fleet's window: Great Expectations' verdict, the rows it failed."""

    name: str
    frame: Frame
    meaning: str
    success: bool
    unexpected_count: int  # rows (or job-seconds, for the steps frame) that broke it


@dataclass(frozen=True)
class Failure:
    """One check one job failed, with how many of its rows and a few of them."""

    check: str
    meaning: str
    count: int
    examples: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True)
class JobVerdict:
    job: str
    rows: int
    failures: tuple[Failure, ...] = ()

    @property
    def passed(self) -> bool:
        return not self.failures

    def reason(self) -> str:
        """One line for the quarantine hold: the failed checks and their counts."""
        return "; ".join(f"{f.check} ({f.count} rows: {f.meaning})" for f in self.failures)


def _span(seconds: float) -> str:
    """A duration as people read it: its two largest units (`1 h 15 min`, `3 min 20 s`, `2 d 4 h`)."""
    left, parts = round(abs(seconds)), []
    for unit, size in (("d", 86_400), ("h", 3_600), ("min", 60), ("s", 1)):
        if left >= size or (unit == "s" and not parts):
            parts.append(f"{left // size} {unit}")
            left %= size
    return " ".join(parts[:2])


@dataclass(frozen=True)
class ValidationReport:
    since: float
    until: float
    checks: tuple[CheckResult, ...]
    jobs: Mapping[str, JobVerdict] = field(default_factory=dict)
    newest_row: float | None = None  # the lake's newest row when the window is empty (None: none at all)
    only: tuple[str, ...] = ()  # the jobs validated, when not the whole lake

    @property
    def empty(self) -> bool:
        """Nothing to validate: no rows and no unreadable file in the window, which must not pass as clean."""
        return not self.jobs

    @property
    def passed(self) -> bool:
        return (not self.empty and all(v.passed for v in self.jobs.values())
                and all(c.success for c in self.checks))

    def empty_reason(self) -> str:
        """Why an empty window fails, and where the lake's data is: the loops may have stopped appending, or the
        window may be in the wrong place."""
        of = f" of {', '.join(self.only)}" if self.only else ""
        text = f"metric validation found no rows{of} in the window {utc(self.since)} – {utc(self.until)}: "
        if self.newest_row is None:
            return text + f"the lake has no rows{of} at all. Do the loops' deployments append to this lake?"
        gap = self.until - self.newest_row
        where = f"{_span(gap)} before the window's end" if gap >= 0 else f"{_span(gap)} after the window's end"
        return text + f"the lake's newest row is at {utc(self.newest_row)}, {where}."

    @property
    def failed_jobs(self) -> list[str]:
        return sorted(job for job, v in self.jobs.items() if not v.passed)
