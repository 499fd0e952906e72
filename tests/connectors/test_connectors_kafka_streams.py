"""The Kafka Streams queries against the exposition a Kafka Streams application serves through the Prometheus JMX
exporter (java agent) with its default naming, in a real Prometheus, read with `daedalus observe`.

No broker can run here, so `exposition-kafka-streams.txt` is written, not scraped: 7 scrapes 5 s apart of three pods
and a broker. The names follow the exporter's default format (`<domain>_<first key property's value>_<attribute>`,
the other key properties as labels, `-` and `.` as `_`, case kept) applied to the MBeans of Kafka's monitoring
docs at the default recording level `info`. Its known answers, by construction:

- `orders-app-0` runs two stream threads processing 400 and 600 records/s (busy shares: process + punctuate +
  commit ratios 0.55 and 0.78), `orders-app-1` two threads at 500 and 300 records/s (0.45 and 0.30);
- their main consumers lag 120, 80, 40 and 60 records on the four partitions of `orders`, each growing by 2 per
  scrape;
- the decoys: another application (`billing-app-0`, topic `billing`, 5,000 records/s), another topic read by the same
  consumers (a repartition topic, 999 records behind per partition), the restore consumers reading a changelog
  topic (5,000 behind), the client-level `records-lag-max`, and the broker's counter of the other topic.

The pods are labelled as Kubernetes service discovery would (`namespace`, `pod`, and the pod label `app`).

The same MBeans are then published as other exporters would (kafka_naming.py): the JMX exporter 1.x with its default
naming, Strimzi's metrics reporter with Strimzi's broker rules, Confluent's rule sets; each must give the same numbers
with the queries docs/engines.md gives for it.
"""

from __future__ import annotations

import json
import re
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from connectors_support import needs_prometheus
from kafka_naming import Bean, RuleSet, Sample, beans, strimzi_reporter

from daedalus.cli import observe
from daedalus.runtime.prometheus import local_prometheus
from tests.cli.cli_support import flat, tiny_app

pytestmark = [needs_prometheus, pytest.mark.slow]

EXPOSITION = Path(__file__).with_name("exposition-kafka-streams.txt")
STEP = 5
_SAMPLE = re.compile(r"^(\w+)(?:\{(.*)\})? (\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
run = tiny_app(observe.observe)


def _scrapes() -> list[tuple[float, str, list[tuple[str, dict[str, str], float]]]]:
    """(time, pod, samples) per scrape, as written; HELP and TYPE lines are the exporter's, not data."""
    out: list[tuple[float, str, list[tuple[str, dict[str, str], float]]]] = []
    for line in EXPOSITION.read_text().splitlines():
        if line.startswith("# scrape"):
            _, _, t, pod = line.split()
            out.append((float(t), pod, []))
        elif not line.startswith("#"):
            m = _SAMPLE.match(line)
            assert m, line
            out[-1][2].append((m.group(1), dict(_LABEL.findall(m.group(2) or "")), float(m.group(3))))
    return out


SCRAPES = _scrapes()
LAST = max(t for t, _, _ in SCRAPES)
SHIFT = float(int(time.time()) // 3600 * 3600) - 3600 - LAST  # the last scrape an hour ago, on the step grid


def _target(pod: str) -> dict[str, str]:
    """The labels the scrape adds to a pod's series on Kubernetes."""
    if pod.startswith("kafka-"):
        return {"namespace": "kafka", "pod": pod}
    return {"namespace": "streaming", "pod": pod, "app": pod.rsplit("-", 1)[0]}


def _openmetrics(scrapes: list[tuple[float, str, list[tuple[str, dict[str, str], float]]]]) -> str:
    families: dict[str, list[tuple[str, float, float]]] = defaultdict(list)
    for t, pod, samples in scrapes:
        for name, labels, value in samples:
            text = ",".join(f'{k}="{v}"' for k, v in sorted({**labels, **_target(pod)}.items()))
            moved = value + SHIFT if name == "process_start_time_seconds" else value  # a time moves with its scrape
            families[name].append((f"{name}{{{text}}}", t + SHIFT, moved))
    lines = []
    for name, samples in sorted(families.items()):
        lines.append(f"# TYPE {name.removesuffix('_total')} {'counter' if name.endswith('_total') else 'gauge'}")
        lines += [f"{series} {value!r} {t:.3f}" for series, t, value in sorted(samples)]
    return "\n".join(lines) + "\n# EOF\n"


@pytest.fixture(scope="module")
def prom_url(tmp_path_factory):
    with local_prometheus(tmp_path_factory.mktemp("prom"), openmetrics=_openmetrics(SCRAPES)) as url:
        yield url


def _observe(url: str, tmp_path: Path, selector: str, topic: str, queries: str = "", check: bool = True) -> dict:
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(f"""
jobs:
  - name: orders
    engine: kafka-streams
    prometheus: {{url: "{url}", step: {STEP}s}}
    selector: {selector}
    source: {{topic: {topic}}}
    scale_target: {{kind: StatefulSet, namespace: streaming, name: orders-app}}
{queries}""")
    out = tmp_path / "seen.json"
    result = run("observe", "orders", "--jobs-file", jobs, "--json", out, "--window", 4 * STEP, "--at", LAST + SHIFT)
    if not check:
        return {"output": flat(result.output), "exit_code": result.exit_code}
    assert result.exit_code == 0, result.output
    seen = json.loads(out.read_text())
    assert ("No hold" in flat(result.output)) == (seen["holds"] == [])
    return seen


def test_the_exposition_has_its_decoys():
    names = {(pod, name) for _, pod, samples in SCRAPES for name, _, _ in samples}
    assert ("billing-app-0", "kafka_streams_stream_thread_metrics_process_total") in names
    topics = {labels["topic"] for _, _, s in SCRAPES for n, labels, _ in s if n.endswith("records_lag")}
    assert topics == {"orders", "billing", "orders-app-KSTREAM-REPARTITION-0000000003-repartition",
                      "orders-app-counts-changelog", "billing-app-KSTREAM-REPARTITION-0000000003-repartition",
                      "billing-app-counts-changelog"}
    threads = {labels["thread_id"] for _, pod, s in SCRAPES for n, labels, _ in s
               if pod == "orders-app-0" and n == "kafka_streams_stream_thread_metrics_process_total"}
    assert len(threads) == 2  # a second stream thread per instance
    # No Kafka Streams series names its application: only the scrape's labels tell the applications apart.
    assert not any("application" in k for _, _, s in SCRAPES for _, labels, _ in s for k in labels)


def _known_answers(seen: dict) -> None:
    """What the exposition was written with: the application and only it, with no hold."""
    assert seen["holds"] == []
    assert seen["scaleout"] == 2  # pods with alive stream threads, not the 4 threads nor the billing pod
    workers = seen["workers"]
    assert set(workers) == {"orders-app-0", "orders-app-1"}
    # throughput: the sum of the pod's threads; utilisation: their mean busy share
    assert workers["orders-app-0"]["throughput"][-1] == pytest.approx(400 + 600)
    assert workers["orders-app-1"]["throughput"][-1] == pytest.approx(500 + 300)
    assert workers["orders-app-0"]["cpu"][-1] == pytest.approx((0.55 + 0.78) / 2)
    assert workers["orders-app-1"]["cpu"][-1] == pytest.approx((0.45 + 0.30) / 2)
    assert seen["lag"][-1] == pytest.approx(120 + 80 + 40 + 60 + 4 * 2 * 6)  # orders only, at the 7th scrape
    assert seen["workload"][-1] == pytest.approx(1900)  # the broker's messages in on orders, not billing
    assert seen["uptime_s"][-1] == pytest.approx(1800 + 30)  # since the newer of the two JVMs started


def test_the_application_and_only_it_is_observed_with_the_right_numbers(prom_url, tmp_path):
    _known_answers(_observe(prom_url, tmp_path, "{namespace: streaming, app: orders-app}", "orders"))


def test_the_jvm_cpu_load_by_name(prom_url, tmp_path):
    seen = _observe(prom_url, tmp_path, "{namespace: streaming, app: orders-app}", "orders",
                    "    queries: {cpu: jvm-cpu-load}\n")
    assert {w: v["cpu"][-1] for w, v in seen["workers"].items()} == {"orders-app-0": 0.41, "orders-app-1": 0.29}


def test_a_rule_set_with_lowercase_names_needs_the_documented_overrides(prom_url, tmp_path):
    """`lowercaseOutputName: true` (most published rule sets) renames the JVM's series only: the `jvm-cpu-load`
    override of docs/engines.md for such a rule set reads nothing here, where the names keep their case."""
    override = "    queries: {cpu: 'max by (pod) (java_lang_operatingsystem_processcpuload{${selector}})'}\n"
    seen = _observe(prom_url, tmp_path, "{namespace: streaming, app: orders-app}", "orders", override)
    assert any(h.startswith("no data for cpu") or "reports throughput only" in h for h in seen["holds"]), seen["holds"]


# --- The same application under the exporters people run (tests/connectors/kafka_naming.py) -------------------------
# Each scrape's MBeans, rebuilt from the exposition's HELP templates and labels, are published again by a broker and an
# application exporter; the client-level string attributes (state, application id, version, topology), the failed
# threads and the broker's all-topics counter are added as decoys, since the default naming skips or hides them.

RULES = Path(__file__).parent
BEANS, OWN = beans(EXPOSITION)
STRIMZI_BROKER = RuleSet((RULES / "kafka-rules-strimzi-broker.yml").read_text())
CONFLUENT_BROKER = RuleSet((RULES / "kafka-rules-confluent-broker.yml").read_text())
EXPORTERS: dict[str, tuple[Callable[[Bean], Sample | None], RuleSet]] = {
    "exporter 1.x, default naming": (RuleSet("").publish, STRIMZI_BROKER),
    "Strimzi metrics reporter": (strimzi_reporter, STRIMZI_BROKER),
    "Confluent rule sets": (RuleSet((RULES / "kafka-rules-confluent-streams.yml").read_text()).publish,
                            CONFLUENT_BROKER),
}


def _decoys(pod: str, found: list[Bean]) -> list[Bean]:
    extra = []
    for bean in found:
        if bean.attribute == "alive-stream-threads":
            extra += [Bean(bean.domain, bean.properties, attribute, value) for attribute, value in (
                ("state", "RUNNING"), ("application-id", pod.rsplit("-", 1)[0]), ("version", "3.9.1"),
                ("commit-id", "5b3b25ad2ea2c1b4"), ("topology-description", "Topologies: Sub-topology: 0"),
                ("failed-stream-threads", 0))]
    counts = [b.value for b in found if b.attribute == "Count" and dict(b.properties).get("name") == "MessagesInPerSec"]
    if counts:
        extra.append(Bean("kafka.server", (("type", "BrokerTopicMetrics"), ("name", "MessagesInPerSec")), "Count",
                          sum(float(c) for c in counts)))
    return extra


def _published(exporter: str) -> list[tuple[float, str, list[Sample]]]:
    app, broker = EXPORTERS[exporter]
    out = []
    for (t, pod, found), (_, _, own) in zip(BEANS, OWN, strict=True):
        publish = broker.publish if pod.startswith("kafka-") else app
        samples = [s for b in found + _decoys(pod, found) if (s := publish(b)) is not None]
        out.append((t, pod, samples + own))  # the JVM's process_* series: every one of them publishes its own
    return out


def _docs_override() -> dict[str, str]:
    """The `queries:` override docs/engines.md gives for Confluent's rule sets, as written there."""
    text = (Path(__file__).parents[2] / "docs" / "engines.md").read_text()
    block = next(b for b in re.findall(r"```yaml\n(.*?)```", text, re.S) if 'alive_stream_threads!=""' in b)
    return yaml.safe_load(block)["queries"]


def test_the_rule_engine_reproduces_the_written_exposition():
    """The beans rebuilt from the exposition, published by the exporter 0.x (no suffix stripped) with no rules for the
    applications and Strimzi's broker rules for the broker, give back every sample as written."""
    apps = RuleSet("", strip=False)
    broker = RuleSet((RULES / "kafka-rules-strimzi-broker.yml").read_text(), strip=False)
    for (t, pod, found), (_, _, own), (_, _, written) in zip(BEANS, OWN, SCRAPES, strict=True):
        publish = (broker if pod.startswith("kafka-") else apps).publish
        assert sorted([publish(b) for b in found] + own, key=repr) == sorted(written, key=repr), (t, pod)


def _first_scrape(exporter: str, pod: str) -> dict[str, list[set[str]]]:
    """Series name → the label names of each of its series, in the pod's first scrape."""
    samples = next(s for _, p, s in _published(exporter) if p == pod)
    found: dict[str, list[set[str]]] = defaultdict(list)
    for name, labels, _ in samples:
        found[name].append(set(labels))
    return found


def test_the_names_each_exporter_gives():
    default, strimzi, confluent = (_first_scrape(e, "orders-app-0") for e in EXPORTERS)
    # The exporter 1.x and the Strimzi reporter drop `_total` from `process-total`: a gauge, not a counter.
    for found in (default, strimzi, confluent):
        assert "kafka_streams_stream_thread_metrics_process" in found
        assert "kafka_streams_stream_thread_metrics_process_total" not in found
        assert "kafka_consumer_consumer_fetch_manager_metrics_records_lag" in found
    threads = "kafka_streams_stream_metrics_alive_stream_threads"
    assert threads in default and "java_lang_OperatingSystem_ProcessCpuLoad" in default
    assert threads in strimzi and not any(n.startswith("java_lang") for n in strimzi)
    assert {"client_id", "application_id"} in strimzi["kafka_streams_stream_metrics_application_id_info"]
    # Confluent's: the threads in a label of one family (its dashboards read `kafka_streams_stream_metrics{
    # alive_stream_threads!=""}`), the client type on the consumer's series, no java.lang beans (not whitelisted).
    assert {"client_id", "alive_stream_threads"} in confluent["kafka_streams_stream_metrics"]
    assert {"client_id", "application_id"} in confluent["kafka_streams_stream_metrics"]
    assert threads not in confluent
    lag = confluent["kafka_consumer_consumer_fetch_manager_metrics_records_lag"]
    assert lag and all("client_type" in labels for labels in lag)
    assert not any(n.startswith("java_lang") for n in confluent)
    strimzi_broker, confluent_broker = (_first_scrape(e, "kafka-0") for e in list(EXPORTERS)[1:])
    # Both publish the broker's all-topics counter under the same name, without `topic`: the topic matcher skips it.
    for found, name in ((strimzi_broker, "kafka_server_brokertopicmetrics_messagesin_total"),
                        (confluent_broker, "kafka_server_brokertopicmetrics_messagesinpersec")):
        assert sorted(found[name], key=len) == [set(), {"topic"}, {"topic"}]


@pytest.fixture(scope="module", params=list(EXPORTERS))
def exported(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp("prom")
    with local_prometheus(folder, openmetrics=_openmetrics(_published(request.param))) as url:
        yield request.param, url


def test_every_exporter_with_its_documented_queries_gives_the_same_numbers(exported, tmp_path):
    exporter, url = exported
    selector = "{namespace: streaming, app: orders-app}"
    if exporter == "Confluent rule sets":
        # The default queries find neither its threads nor its broker's counter: the loop holds.
        seen = _observe(url, tmp_path, selector, "orders", check=False)
        assert "No hold" not in seen["output"]
        assert "no data for scaleout" in seen["output"] and "no data for workload" in seen["output"]
        queries = f"    queries: {json.dumps(_docs_override())}\n"
    else:
        queries = ""  # the default queries read it
    _known_answers(_observe(url, tmp_path, selector, "orders", queries))
