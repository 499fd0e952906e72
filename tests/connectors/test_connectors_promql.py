"""PromQL templates: safe substitution (no injection), load-time errors naming the job and the field."""

from __future__ import annotations

import pytest

from daedalus.connectors.promql import ENGINES, KEYS, STAGE_KEYS, QuerySet, duration, matchers, quote, regex_literal
from daedalus.models.errors import ConfigurationError


def test_quote_escapes_everything_that_could_end_the_string():
    assert quote("ad-events") == '"ad-events"'
    assert quote('a"b') == r'"a\"b"'
    assert quote("a\\b") == r'"a\\b"'
    assert quote("x\ny\t\x01") == r'"x\ny\t\x01"'
    # An attempt to close the matcher and append a query stays one harmless string value.
    assert quote('ysb"} or vector(1) #') == r'"ysb\"} or vector(1) #"'


def test_matchers_are_sorted_and_label_names_must_be_identifiers():
    assert matchers({"namespace": "streaming", "app": "flink"}) == 'app="flink", namespace="streaming"'
    with pytest.raises(ConfigurationError, match=r"selector\.bad-label: not a Prometheus label name"):
        matchers({"bad-label": "x"})
    with pytest.raises(ConfigurationError, match=r"selector\.x\}: not a Prometheus label name"):
        matchers({"x}": "y"})


def test_durations():
    assert duration(60) == "60s"
    assert duration(1.5) == "1500ms"
    assert duration(0) == "1ms"


def test_flink_queries_render_with_the_job_labels():
    q = QuerySet("ysb", "flink", {"namespace": "streaming", "app": "ysb"}, {"topic": "ad-events"}, {}, 60)
    # Rates of the record counters (not the 60 s `…PerSecond` averages), per worker (tests/flink has the full set)
    assert q.query("throughput").startswith(
        'min by (pod) (sum by (pod, task_name) (rate(flink_taskmanager_job_task_numRecordsIn'
        '{app="ysb", namespace="streaming", task_name!~"Source.*"}[60s]))) or sum by (pod) '
        '(rate(flink_taskmanager_job_task_operator_numRecordsOut{app="ysb", namespace="streaming", '
        'operator_name=~"Source.*"}[60s]))')
    assert q.query("workload") == 'sum(rate(kafka_server_brokertopicmetrics_messagesin_total{topic="ad-events"}[60s]))'
    assert q.query("resets", 90) == ('sum(resets(kafka_server_brokertopicmetrics_messagesin_total'
                                     '{topic="ad-events"}[90s])) or vector(0)')
    assert q.query("uptime") == 'max(flink_jobmanager_job_uptime{app="ysb", namespace="streaming"}) / 1000'


def test_every_engine_defines_every_required_query():
    for engine, templates in ENGINES.items():
        missing = {k for k in KEYS if k not in ("resets", *STAGE_KEYS)} - set(templates)  # duplicates: every engine
        assert not missing, f"{engine} lacks {missing}"
        QuerySet("j", engine, {"namespace": "n"}, {"topic": "t"}, {}, 60)


def test_an_injected_selector_value_stays_inside_its_string():
    q = QuerySet("j", "flink", {"namespace": 'x"} or vector(1) or up{a="'}, {"topic": "t"}, {}, 60)
    assert q.query("uptime") == (r'max(flink_jobmanager_job_uptime'
                                    r'{namespace="x\"} or vector(1) or up{a=\""}) / 1000')


def test_overrides_replace_templates_and_may_use_single_values():
    q = QuerySet("j", "spark", {"app": "a"}, {"topic": "t"},
                 {"workload": "sum(rate(my_in_total{app=${selector.app}, topic=${source.topic}}[${window}]))"}, 15)
    assert q.query("workload") == 'sum(rate(my_in_total{app="a", topic="t"}[15s]))'


def test_load_time_errors_name_the_job_and_the_field():
    with pytest.raises(ConfigurationError, match=r"job 'ysb': field source\.topic: missing, and the workload query"):
        QuerySet("ysb", "flink", {"namespace": "n"}, {}, {}, 60)
    with pytest.raises(ConfigurationError, match=r"job 'ysb': field queries\.workoad: not a query the monitor uses"):
        QuerySet("ysb", "flink", {"namespace": "n"}, {"topic": "t"}, {"workoad": "x"}, 60)
    with pytest.raises(ConfigurationError, match=r"job 'ysb': field queries\.lag: unknown placeholder '\$\{topic\}'"):
        QuerySet("ysb", "flink", {"namespace": "n"}, {"topic": "t"}, {"lag": "sum(x{t=${topic}})"}, 60)
    with pytest.raises(ConfigurationError, match=r"job 'ysb': field engine: no PromQL templates for engine 'storm'"):
        QuerySet("ysb", "storm", {"namespace": "n"}, {}, {}, 60)


def test_regex_literal_escapes_every_re2_metacharacter():
    assert regex_literal(".*") == r"\.\*"
    assert regex_literal(r"a\b.c+d*e?f(g)h|i[j]k{l}m^n$o") == r"a\\b\.c\+d\*e\?f\(g\)h\|i\[j\]k\{l\}m\^n\$o"
    assert regex_literal("ad-events_2") == "ad-events_2"


def test_a_value_after_a_regex_matcher_matches_itself_only():
    overrides = {"lag": "sum(x{app=~${selector.app}, topic!~ ${source.topic}, ns=${selector.app}})"}
    q = QuerySet("j", "flink", {"app": ".*"}, {"topic": 'a|b"'}, overrides, 60)
    # RE2-escaped first, then quoted as a PromQL string: Prometheus reads the regex \.\* and a\|b"
    assert q.query("lag") == r'sum(x{app=~"\\.\\*", topic!~ "a\\|b\"", ns=".*"})'


def test_every_engine_checks_for_workers_exported_twice():
    q = QuerySet("ysb", "flink", {"namespace": "streaming"}, {"topic": "t"}, {}, 60)
    # TaskManager-scope CPU carries no job label: only the job's own TaskManagers (joined on its tasks) count
    series = ('flink_taskmanager_Status_JVM_CPU_Load and on (pod) flink_taskmanager_job_task_operator_numRecordsOut'
              '{namespace="streaming", operator_name=~"Source.*"}')
    assert q.query("duplicates").startswith(f"{series} and on (pod) (count by (pod) ({series}) > 1) or (")
    for engine in ENGINES:
        assert "count by (pod)" in QuerySet("j", engine, {"namespace": "n"}, {"topic": "t"}, {}, 60).query(
            "duplicates")


def test_flink_stages_are_read_per_task_over_the_last_window():
    q = QuerySet("j", "flink", {"job_name": "demo"}, {"topic": "t"}, {}, 12)
    busy = 'flink_taskmanager_job_task_accumulateBusyTimeMs{job_name="demo"}[12s]'
    assert q.query("stage_busy") == f"clamp_max(max by (task_name) (deriv({busy})) / 1000, 1)"
    assert q.query("stage_parallelism") == ('count by (task_name) (count_over_time('
                                            'flink_taskmanager_job_task_accumulateBusyTimeMs{job_name="demo"}[12s]))')
    assert all(not QuerySet("j", e, {"n": "n"}, {"topic": "t"}, {}, 60).has("stage_busy") for e in ("spark",))
