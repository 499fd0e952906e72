"""PromQL template sets per engine, and safe substitution of a job's labels into them.

A template names what the monitor phase needs; `${...}` placeholders are filled from the job's entry:

- `${selector}`: the job's label matchers, `k1="v1", k2="v2"` (values escaped as PromQL strings);
- `${selector.KEY}` and `${source.KEY}`: one value as a complete, quoted PromQL string (`"ad-events"`); right
  after a regex matcher (`=~`, `!~`) the value is first escaped for RE2, so it matches itself only (`.*` is
  the two characters, not everything);
- `${window}`: the rate window (4 × the query step, at least 1 s); `${range}`: the loop's window (resets);
- `${stale}`: how old a worker's newest sample may be before it counts as stale (default 2 × the step).

Values are only ever inserted as whole quoted string literals and label names must be identifiers, so a
job name, selector or topic cannot change the structure of a query (no PromQL injection).

Per-worker templates (`WORKER_KEYS`) aggregate `by (pod)`: the monitor aligns workers on the `pod` label.
Clusters that label workers differently override the template with `label_replace(..., "pod", ...)`.
`duplicates` (`CHECK_KEYS`) returns the raw series of a metric each worker exports exactly once (its JVM CPU
load), for the pods that export it more than once: a pod scraped twice (two overlapping scrape jobs) would
double its throughput under `sum by (pod)`, so the monitor holds and names the labels that differ.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from daedalus.models.errors import ConfigurationError

WORKER_LABEL = "pod"
JOB_KEYS = ("workload", "lag", "scaleout", "uptime")
WORKER_KEYS = ("throughput", "cpu", "fresh")  # fresh: samples of each worker in the last ${stale}, absent if none
CHECK_KEYS = ("duplicates",)  # raw series of every worker that exports its one-per-worker metric more than once
OPTIONAL_KEYS = ("resets",)  # number of counter resets in the loop's window
KEYS = (*JOB_KEYS, *WORKER_KEYS, *CHECK_KEYS, *OPTIONAL_KEYS)

_PLACEHOLDER = re.compile(r"\$\{([a-z_]+)(?:\.([A-Za-z0-9_.-]+))?\}")
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_REGEX_MATCHER = re.compile(r"[=!]~\s*$")  # a placeholder right after this is a regex
_RE2_SPECIAL = frozenset("\\.+*?()|[]{}^$")


def duplicated(series: str) -> str:
    """The series of `series` (one per worker, normally) for the pods that have more than one of them."""
    return f"{series} and on ({WORKER_LABEL}) (count by ({WORKER_LABEL}) ({series}) > 1)"


# Kafka broker (JMX exporter): messages arriving per topic, the workload of any Kafka-fed job.
BROKER_MESSAGES_IN = "kafka_server_brokertopicmetrics_messagesin_total{topic=${source.topic}}"
BROKER = {
    "workload": f"sum(rate({BROKER_MESSAGES_IN}[${{window}}]))",
    "resets": f"sum(resets({BROKER_MESSAGES_IN}[${{range}}])) or vector(0)",
}

# Flink in reactive mode, Prometheus reporter (`flink_<scope>_<metric>`), one TaskManager per pod.
# Lag is the Kafka source's `pendingRecords` (FLIP-33): its sum over readers is the whole backlog in
# tuples, which the recovery model needs; `records_lag_max` (a maximum per reader) underestimates it.
FLINK = {
    **BROKER,
    "throughput": "sum by (pod) (flink_taskmanager_job_task_operator_numRecordsOutPerSecond"
    '{${selector}, operator_name=~"Source.*"})',
    "cpu": "max by (pod) (flink_taskmanager_Status_JVM_CPU_Load{${selector}})",
    "fresh": "sum by (pod) (count_over_time(flink_taskmanager_Status_JVM_CPU_Load{${selector}}[${stale}]))",
    "duplicates": duplicated("flink_taskmanager_Status_JVM_CPU_Load{${selector}}"),
    "lag": "sum(flink_taskmanager_job_task_operator_pendingRecords{${selector}})",
    "scaleout": "max(flink_jobmanager_numRegisteredTaskManagers{${selector}})",
    "uptime": "max(flink_jobmanager_job_uptime{${selector}}) / 1000",
}

# Kafka Streams, JMX exporter with lowercased names; one instance per pod.
_KS_PROCESS = "kafka_streams_stream_task_metrics_process_total{${selector}}"
KAFKA_STREAMS = {
    "workload": BROKER["workload"],
    "throughput": f"sum by (pod) (rate({_KS_PROCESS}[${{window}}]))",
    "cpu": "max by (pod) (java_lang_operatingsystem_processcpuload{${selector}})",
    "fresh": "sum by (pod) (count_over_time(java_lang_operatingsystem_processcpuload{${selector}}[${stale}]))",
    "duplicates": duplicated("java_lang_operatingsystem_processcpuload{${selector}}"),
    "lag": "sum(kafka_consumer_consumer_fetch_manager_metrics_records_lag{${selector}, topic=${source.topic}})",
    "scaleout": "count(max by (pod) (kafka_streams_stream_metrics_alive_stream_threads{${selector}}) > 0)",
    "uptime": "time() - max(process_start_time_seconds{${selector}})",
    "resets": f"(sum(resets({_KS_PROCESS}[${{range}}])) or vector(0)) + ({BROKER['resets']})",
}

# Spark Structured Streaming: the query's progress from the driver (rows read, as a counter summing each batch's
# `numInputRows`: Spark's per-batch rows-per-second figures are not rates per wall-clock second; rows behind
# the latest offsets) and each executor's JVM CPU. Spark reports throughput per query, not per executor: it
# is split evenly over the executors that report CPU. Workload: the Kafka broker's messages in, as above.
_SPARK_CPU = "java_lang_operatingsystem_processcpuload{${selector}}"
_SPARK_READ = "spark_streaming_input_rows_total{${selector}}"
SPARK = {
    "workload": BROKER["workload"],
    "throughput": f"max by (pod) ({_SPARK_CPU}) * 0 + on() group_left() "
    f"(sum(rate({_SPARK_READ}[${{window}}])) / count({_SPARK_CPU}))",
    "cpu": f"max by (pod) ({_SPARK_CPU})",
    "fresh": f"sum by (pod) (count_over_time({_SPARK_CPU}[${{stale}}]))",
    "duplicates": duplicated(_SPARK_CPU),
    "lag": "sum(spark_streaming_source_offsets_behind_latest{${selector}})",
    "scaleout": f"count(max by (pod) ({_SPARK_CPU}))",
    "uptime": "time() - max(spark_streaming_query_start_time_seconds{${selector}})",
    "resets": f"(sum(resets({_SPARK_READ}[${{range}}])) or vector(0)) + ({BROKER['resets']})",
}

ENGINES: dict[str, dict[str, str]] = {"flink": FLINK, "kafka-streams": KAFKA_STREAMS, "spark": SPARK}


def quote(value: str) -> str:
    """A PromQL double-quoted string literal holding exactly `value`."""
    out = []
    for ch in value:
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def regex_literal(value: str) -> str:
    """An RE2 pattern that matches exactly `value` (Prometheus anchors label regexes at both ends)."""
    return "".join("\\" + ch if ch in _RE2_SPECIAL else ch for ch in value)


def matchers(selector: Mapping[str, str], where: str = "selector") -> str:
    """`k="v", …` in a stable order; label names must be PromQL identifiers."""
    for key in selector:
        if not _LABEL_NAME.match(key):
            raise ConfigurationError(f"{where}.{key}: not a Prometheus label name (letters, digits, _)")
    return ", ".join(f"{k}={quote(v)}" for k, v in sorted(selector.items()))


def duration(seconds: float) -> str:
    """A PromQL duration in whole milliseconds (`60s`, `1500ms`)."""
    ms = max(1, round(seconds * 1000))
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


class QuerySet:
    """The rendered queries of one job: its engine's templates with the job's overrides and labels."""

    def __init__(self, job: str, engine: str, selector: Mapping[str, str], source: Mapping[str, str],
                 overrides: Mapping[str, str], window_s: float, stale_s: float | None = None) -> None:
        if engine not in ENGINES:
            raise ConfigurationError(f"job {job!r}: field engine: no PromQL templates for engine {engine!r}; "
                                     f"known: {', '.join(sorted(ENGINES))}")
        unknown = sorted(set(overrides) - set(KEYS))
        if unknown:
            raise ConfigurationError(f"job {job!r}: field queries.{unknown[0]}: not a query the monitor uses; "
                                     f"known: {', '.join(KEYS)}")
        self.job = job
        self.templates = {**ENGINES[engine], **overrides}
        self._selector = dict(selector)
        self._source = dict(source)
        self._window = duration(max(window_s, 1.0))
        self._stale = duration(window_s / 2 if stale_s is None else stale_s)
        self._matchers = matchers(self._selector, f"job {job!r}: field selector")
        for key, template in self.templates.items():  # fail at load time, not in the loop
            self._render(key, template, 60.0)

    def _render(self, key: str, template: str, range_s: float) -> str:
        def fill(m: re.Match[str]) -> str:
            name, sub = m.group(1), m.group(2)
            where = f"job {self.job!r}: field queries.{key}"
            if name in ("selector", "source") and sub is not None:
                values = self._selector if name == "selector" else self._source
                if sub not in values:
                    raise ConfigurationError(f"job {self.job!r}: field {name}.{sub}: missing, and the {key} query "
                                             f"needs it (template {template!r})")
                regex = _REGEX_MATCHER.search(template, 0, m.start()) is not None
                return quote(regex_literal(values[sub]) if regex else values[sub])
            if sub is None and name in ("selector", "window", "range", "stale"):
                return {"selector": self._matchers, "window": self._window, "range": duration(range_s),
                        "stale": self._stale}[name]
            raise ConfigurationError(f"{where}: unknown placeholder {m.group(0)!r}; known: ${{selector}}, "
                                     "${selector.KEY}, ${source.KEY}, ${window}, ${range}, ${stale}")

        return _PLACEHOLDER.sub(fill, template)

    def query(self, key: str, range_s: float = 60.0) -> str:
        """The PromQL for one metric; `range_s` fills `${range}`."""
        return self._render(key, self.templates[key], range_s)

    @property
    def stale_window(self) -> str:
        """The staleness window, as a PromQL duration."""
        return self._stale

    def has(self, key: str) -> bool:
        return key in self.templates
