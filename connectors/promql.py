"""PromQL template sets per engine, and safe substitution of a job's labels into them.

A template names what the monitor phase needs; `${...}` placeholders are filled from the job's entry:

- `${selector}`: the job's label matchers, `k1="v1", k2="v2"` (values escaped as PromQL strings);
- `${selector.KEY}` and `${source.KEY}`: one value as a complete, quoted PromQL string (`"ad-events"`); right
  after a regex matcher (`=~`, `!~`) the value is first escaped for RE2, so it matches itself only (`.*` is
  the two characters, not everything);
- `${window}`: the rate window (4 × the query step, at least 1 s); `${range}`: the loop's window (resets);
- `${stale}`: how old a worker's newest sample may be before it counts as stale (default 2 × the step);
- `${worker}`: the name of the label that tells the job's workers apart (`worker_label`, default `pod`).

Values are only ever inserted as whole quoted string literals and label names must be identifiers, so a
job name, selector or topic cannot change the structure of a query (no PromQL injection).

Per-worker templates (`WORKER_KEYS`) aggregate `by (${worker})`: the monitor aligns workers on that label, `pod`
by default (Kubernetes service discovery adds it to every series of a pod). A standalone Flink has no `pod`: its
TaskManagers are told apart by `tm_id`, which Flink itself puts on every TaskManager- and task-scope series, so a
Flink job outside Kubernetes sets `worker_label: tm_id`.
`duplicates` (`CHECK_KEYS`) returns the raw series of a metric each worker exports exactly once (its JVM CPU
load), for the workers that export it more than once: a pod scraped twice (two overlapping scrape jobs) would
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
# Per stage (`by (task_name)`), at the end of the window, where the engine publishes its tasks: the busiest subtask's
# busy share, the subtasks' mean backpressured share, records in per second, subtasks. Optional: without them the
# loop still scales, it only cannot say which stage limits the job (models/capacity/verification.py).
STAGE_KEYS = ("stage_busy", "stage_backpressure", "stage_records", "stage_parallelism")
STAGE_LABEL = "task_name"
KEYS = (*JOB_KEYS, *WORKER_KEYS, *CHECK_KEYS, *OPTIONAL_KEYS, *STAGE_KEYS)

_PLACEHOLDER = re.compile(r"\$\{([a-z_]+)(?:\.([A-Za-z0-9_.-]+))?\}")
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_REGEX_MATCHER = re.compile(r"[=!]~\s*$")  # a placeholder right after this is a regex
_RE2_SPECIAL = frozenset("\\.+*?()|[]{}^$")


def duplicated(series: str) -> str:
    """The series of `series` (one per worker, normally) for the workers that have more than one of them."""
    return f"{series} and on (${{worker}}) (count by (${{worker}}) ({series}) > 1)"


# Kafka broker (JMX exporter): messages arriving per topic, the workload of any Kafka-fed job.
BROKER_MESSAGES_IN = "kafka_server_brokertopicmetrics_messagesin_total{topic=${source.topic}}"
BROKER = {
    "workload": f"sum(rate({BROKER_MESSAGES_IN}[${{window}}]))",
    "resets": f"sum(resets({BROKER_MESSAGES_IN}[${{range}}])) or vector(0)",
}

# Flink 2.x, Prometheus reporter (`flink_<scope>_<metric>`), one TaskManager (one slot) per worker. Which labels a
# real reporter puts on which scope decides the queries (docs/engines.md):
# - job and task scope carry `job_name` (and `tm_id`, `subtask_index`, `task_name`, operator scope `operator_name`):
#   the job's selector (`job_name`, sanitised by Flink: `daedalus-demo` is published as `daedalus_demo`) picks them;
# - TaskManager scope (JVM CPU) carries only `tm_id` and `host` (plus `pod` on Kubernetes), never `job_name`: it is
#   attributed to the job by joining on the worker label with the job's own task series (`and on (${worker})`), so
#   TaskManagers of other jobs and idle ones drop out;
# - the JobManager's cluster gauges (`numRegisteredTaskManagers`) carry no job label at all: the scale-out is counted
#   from the job's own tasks, the distinct subtasks of its source (= its parallelism; one slot per TaskManager).
# Per worker, throughput is the rate at which its tasks take records in (the smallest over its non-source tasks: each
# record passes every stage once, and a TaskManager that also runs a non-parallel stage sees the whole job's records
# there, which summed over the workers would count them twice), or what its sources emit when the whole job is
# chained into them; after a keyBy
# a source subtask's output is not what its own TaskManager processes (under backpressure one reader may stall
# while another feeds every worker). Rates come from the record counters, not the `…PerSecond` gauges, 60 s moving
# averages that trail every change by half a minute. Utilisation is the busy share of the worker's busiest task,
# which reaches 1 when the task saturates however many processes share the cores; the JVM's CPU load does not
# (`FLINK_JVM_CPU`, measured in docs/engines.md). It is the slope of the task's cumulative busy milliseconds
# (`accumulateBusyTimeMs`) over the same window as the throughput: the `busyTimeMsPerSecond` gauge is a 60 s
# moving average, so on a rising load it pairs today's records with the busy share of half a minute ago and the
# capacity read from the pair is too high (too low on a falling load). `deriv`, not `rate`: the cumulative value
# is wall time minus the idle time counted so far, and idle time is counted when an idle stretch ends, so the
# value steps back by a few ms now and then, which `rate` would read as a counter reset. Reporters without the
# cumulative gauge fall back to `busyTimeMsPerSecond`.
# Lag is the source's `pendingRecords` (FLIP-33): its sum over readers is the whole backlog in tuples, which the
# recovery model needs; `records_lag_max` (a maximum per reader) underestimates it.
FLINK_SOURCE_OUT = 'flink_taskmanager_job_task_operator_numRecordsOut{${selector}, operator_name=~"Source.*"}'
FLINK_TASKS_IN = 'flink_taskmanager_job_task_numRecordsIn{${selector}, task_name!~"Source.*"}'
FLINK_BUSY_MS = "flink_taskmanager_job_task_accumulateBusyTimeMs{${selector}}"
FLINK_BUSY_GAUGE = "flink_taskmanager_job_task_busyTimeMsPerSecond{${selector}}"
FLINK_JVM_CPU = f"max by (${{worker}}) (flink_taskmanager_Status_JVM_CPU_Load and on (${{worker}}) {FLINK_SOURCE_OUT})"
# Older reporters, and the simulator's exporter (sim/exporter.py), publish only the per-second gauges, the JVM's
# CPU load under the job's selector and the registered TaskManagers: each query falls back to that shape, and only
# for a job that publishes none of the counters above (`… unless on () count(…)` is empty as soon as it does), so
# a real Flink 2.x job never mixes in a TaskManager of another job.
_LEGACY_CPU = "flink_taskmanager_Status_JVM_CPU_Load{${selector}}"


def _or_legacy(query: str, legacy: str, present: str = FLINK_SOURCE_OUT) -> str:
    """`query`, or `legacy` when the job publishes no `present` series at all."""
    return f"{query} or ({legacy} unless on () count({present}))"


FLINK_BUSY = _or_legacy(f"clamp_max(max by (${{worker}}) (deriv({FLINK_BUSY_MS}[${{window}}])) / 1000, 1)",
                        f"clamp_max(max by (${{worker}}) ({FLINK_BUSY_GAUGE}) / 1000, 1)", FLINK_BUSY_MS)


FLINK = {
    **BROKER,
    "throughput": _or_legacy(
        f"min by (${{worker}}) (sum by (${{worker}}, task_name) (rate({FLINK_TASKS_IN}[${{window}}]))) "
        f"or sum by (${{worker}}) (rate({FLINK_SOURCE_OUT}[${{window}}]))",
        "sum by (${worker}) (flink_taskmanager_job_task_operator_numRecordsOutPerSecond"
        '{${selector}, operator_name=~"Source.*"})'),
    "cpu": _or_legacy(FLINK_BUSY, f"max by (${{worker}}) ({_LEGACY_CPU})", FLINK_BUSY_GAUGE),
    "fresh": _or_legacy(f"sum by (${{worker}}) (count_over_time({FLINK_SOURCE_OUT}[${{stale}}]))",
                        f"sum by (${{worker}}) (count_over_time({_LEGACY_CPU}[${{stale}}]))"),
    "duplicates": _or_legacy(
        duplicated(f"flink_taskmanager_Status_JVM_CPU_Load and on (${{worker}}) {FLINK_SOURCE_OUT}"),
        duplicated(_LEGACY_CPU)),
    "lag": "sum(flink_taskmanager_job_task_operator_pendingRecords{${selector}})",
    "scaleout": _or_legacy(f"count(count by (subtask_index) ({FLINK_SOURCE_OUT}))",
                           "max(flink_jobmanager_numRegisteredTaskManagers{${selector}})"),
    "uptime": "max(flink_jobmanager_job_uptime{${selector}}) / 1000",
    # Stages: Flink's tasks. Over `${window}` only, so the subtasks of attempts before a restart (series of their
    # own, by `task_attempt_id`) have dropped out a window after it. A source's records are what it emits.
    "stage_busy": f"clamp_max(max by (task_name) (deriv({FLINK_BUSY_MS}[${{window}}])) / 1000, 1)",
    "stage_backpressure": "avg by (task_name) (avg_over_time(flink_taskmanager_job_task_backPressuredTimeMsPerSecond"
                          "{${selector}}[${window}])) / 1000",
    "stage_records": f"sum by (task_name) (rate({FLINK_TASKS_IN}[${{window}}])) "
                     f"or sum by (task_name) (rate({FLINK_SOURCE_OUT}[${{window}}]))",
    "stage_parallelism": f"count by (task_name) (count_over_time({FLINK_BUSY_MS}[${{window}}]))",
}
# The utilisation signals a Flink job's `cpu` query may name instead of writing a template (`queries: {cpu:
# jvm-cpu-load}` in the jobs file): busy time is the default; the JVM's CPU load fits TaskManagers with cores of
# their own (a CPU limit per pod), where it reaches 1 at saturation too.
FLINK_CPU_SIGNALS = {"busy-time": FLINK_BUSY, "jvm-cpu-load": FLINK_JVM_CPU}

# Kafka Streams, Prometheus JMX exporter (java agent) with its default naming: no rules, or a catch-all rule without a
# `name`. The exporter names an attribute `<domain>_<first key property's value>_<attribute>`, makes the other key
# properties labels, and replaces every character outside [a-zA-Z0-9:_] by `_`; case is kept
# (`lowercaseOutputName: false`). MBeans from Kafka's monitoring docs, all at the default recording level `info`:
# - `kafka.streams:type=stream-thread-metrics,thread-id=…` `process-total` (records processed) and `process-ratio`,
#   `punctuate-ratio`, `commit-ratio` (shares of the thread's time); the task-level `process-total` is `debug` and
#   absent by default. A worker (pod) runs `num.stream.threads` threads: its throughput is their sum, its utilisation
#   their mean busy share (all its threads busy: saturated);
# - `kafka.streams:type=stream-metrics,client-id=…` `alive-stream-threads`: the scale-out counts pods with one;
# - `kafka.consumer:type=consumer-fetch-manager-metrics,client-id=…,topic=…,partition=…` `records-lag`: the whole
#   backlog of the source topic (its restore consumer reads changelog topics: another topic);
# - `java.lang:type=OperatingSystem` `ProcessCpuLoad` and the agent's `process_start_time_seconds`.
# No Kafka Streams series names its application: the job's selector is the labels the scrape adds (namespace, pod
# labels), one application per pod.
_KS_THREAD = "kafka_streams_stream_thread_metrics_{}{{${{selector}}}}"
# `process-total` keeps its `_total` under the exporter 0.x; from 1.0.1 on (and with the Strimzi metrics reporter) the
# client library strips the suffix from every name it does not publish as a counter: `..._process`.
_KS_PROCESS = '{__name__=~"kafka_streams_stream_thread_metrics_process(?:_total)?", ${selector}}'
_KS_BUSY = " + ".join(_KS_THREAD.format(f"{share}_ratio") for share in ("process", "punctuate", "commit"))
KS_JVM_CPU = "max by (${worker}) (java_lang_OperatingSystem_ProcessCpuLoad{${selector}})"
KAFKA_STREAMS = {
    "workload": BROKER["workload"],
    "throughput": f"sum by (${{worker}}) (rate({_KS_PROCESS}[${{window}}]))",
    "cpu": f"clamp_max(avg by (${{worker}}) ({_KS_BUSY}), 1)",
    "fresh": f"sum by (${{worker}}) (count_over_time({_KS_PROCESS}[${{stale}}]))",
    "duplicates": duplicated("kafka_streams_stream_metrics_alive_stream_threads{${selector}}"),
    "lag": "sum(kafka_consumer_consumer_fetch_manager_metrics_records_lag{${selector}, topic=${source.topic}})",
    "scaleout": "count(max by (${worker}) (kafka_streams_stream_metrics_alive_stream_threads{${selector}}) > 0)",
    "uptime": "time() - max(process_start_time_seconds{${selector}})",
    "resets": f"(sum(resets({_KS_PROCESS}[${{range}}])) or vector(0)) + ({BROKER['resets']})",
}

# Spark Structured Streaming, through the progress listener a job adds in one line (runtime/spark_progress.py):
# Spark's own streaming metrics are figures of the last micro-batch with neither backlog nor busy time. Each series
# carries `query` (the query's name); the driver publishes them all, so the workers are its `executor_up` series,
# their `executor` label copied into the worker label. Spark reports throughput and batch time per query, not per
# executor: both are split evenly over the query's executors (a micro-batch's tasks run on all of them).
_SPARK_EXECUTORS = 'label_replace(spark_streaming_executor_up{${selector}}, "${worker}", "$1", "executor", "(.+)")'
_SPARK_READ = "spark_streaming_input_rows_total{${selector}}"
_SPARK_BATCH = "spark_streaming_batch_seconds_total{${selector}}"
# The backlog is read when a micro-batch is planned and published when it ends, a whole batch later: the lag is that
# backlog plus what arrived since it was read (the workload's rate times its age), so a batch's rows, counted when it
# ends, never exceed the lag before it plus the arrivals since (models/loop/validation.py), and the planner sees
# the rows waiting now. A listener without the age (an older `daedalus`) gives the backlog alone.
_SPARK_BACKLOG = "sum(spark_streaming_source_backlog_rows{${selector}, topic=${source.topic}})"
_SPARK_BACKLOG_TIME = "spark_streaming_source_backlog_time_seconds{${selector}}"


def _per_executor(query: str) -> str:
    """The job-wide `query`, one sample per executor of the job."""
    return f"max by (${{worker}}) ({_SPARK_EXECUTORS}) * 0 + on() group_left() ({query})"


SPARK = {
    "workload": BROKER["workload"],
    "throughput": _per_executor(f"sum(rate({_SPARK_READ}[${{window}}])) / count({_SPARK_EXECUTORS})"),
    "cpu": _per_executor(f"clamp_max(max(rate({_SPARK_BATCH}[${{window}}])), 1)"),
    "fresh": "sum by (${worker}) (label_replace(count_over_time(spark_streaming_executor_up{${selector}}[${stale}]), "
             '"${worker}", "$1", "executor", "(.+)"))',
    "duplicates": duplicated(_SPARK_EXECUTORS),
    "lag": f"{_SPARK_BACKLOG} + ({BROKER['workload']}) * clamp_min(time() - max({_SPARK_BACKLOG_TIME}), 0) "
           f"or {_SPARK_BACKLOG}",
    "scaleout": f"count(max by (${{worker}}) ({_SPARK_EXECUTORS}))",
    "uptime": "time() - max(spark_streaming_query_start_time_seconds{${selector}})",
    "resets": f"(sum(resets({_SPARK_READ}[${{range}}])) or vector(0)) + ({BROKER['resets']})",
}

ENGINES: dict[str, dict[str, str]] = {"flink": FLINK, "kafka-streams": KAFKA_STREAMS, "spark": SPARK}
NAMED: dict[str, dict[str, dict[str, str]]] = {  # engine → query → name → template
    "flink": {"cpu": FLINK_CPU_SIGNALS},
    "kafka-streams": {"cpu": {"busy-time": KAFKA_STREAMS["cpu"], "jvm-cpu-load": KS_JVM_CPU}},
}


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
                 overrides: Mapping[str, str], window_s: float, stale_s: float | None = None,
                 worker_label: str = WORKER_LABEL) -> None:
        if engine not in ENGINES:
            raise ConfigurationError(f"job {job!r}: field engine: no PromQL templates for engine {engine!r}; "
                                     f"known: {', '.join(sorted(ENGINES))}")
        unknown = sorted(set(overrides) - set(KEYS))
        if unknown:
            raise ConfigurationError(f"job {job!r}: field queries.{unknown[0]}: not a query the monitor uses; "
                                     f"known: {', '.join(KEYS)}")
        if not _LABEL_NAME.match(worker_label):
            raise ConfigurationError(f"job {job!r}: field worker_label: {worker_label!r} is not a Prometheus label "
                                     "name (letters, digits, _)")
        self.job, self.worker_label = job, worker_label
        named = NAMED.get(engine, {})
        self.templates = {**ENGINES[engine], **{k: named.get(k, {}).get(v.strip(), v) for k, v in overrides.items()}}
        self._selector = dict(selector)
        self._source = dict(source)
        self.window_s = max(window_s, 1.0)  # the rate window, seconds: how far back each value reaches
        self._window = duration(self.window_s)
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
            if sub is None and name in ("selector", "window", "range", "stale", "worker"):
                return {"selector": self._matchers, "window": self._window, "range": duration(range_s),
                        "stale": self._stale, "worker": self.worker_label}[name]
            raise ConfigurationError(f"{where}: unknown placeholder {m.group(0)!r}; known: ${{selector}}, "
                                     "${selector.KEY}, ${source.KEY}, ${window}, ${range}, ${stale}, ${worker}")

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
