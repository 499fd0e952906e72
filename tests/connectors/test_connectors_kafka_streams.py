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
"""

from __future__ import annotations

import json
import re
import time
from collections import defaultdict
from pathlib import Path

import pytest
from connectors_support import needs_prometheus

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


def _openmetrics() -> str:
    families: dict[str, list[tuple[str, float, float]]] = defaultdict(list)
    for t, pod, samples in SCRAPES:
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
    with local_prometheus(tmp_path_factory.mktemp("prom"), openmetrics=_openmetrics()) as url:
        yield url


def _observe(url: str, tmp_path: Path, selector: str, topic: str, queries: str = "") -> dict:
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


def test_the_application_and_only_it_is_observed_with_the_right_numbers(prom_url, tmp_path):
    seen = _observe(prom_url, tmp_path, "{namespace: streaming, app: orders-app}", "orders")
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
