"""How a Kafka client's or broker's MBeans reach Prometheus under the exporters people run, re-implemented from their
sources so that one exposition can be published under each: the Prometheus JMX exporter's rule engine (with a rule
set or its default naming) and the Strimzi metrics reporter.

- JMX exporter (prometheus/jmx_exporter@4b843c6, `JmxCollector`): each numeric attribute is matched as
  `domain<k1=v1, k2=v2><>attribute: value` against the rules in order, each pattern wrapped as `^.*(?:pattern).*$`;
  the first match names it (`$n` are the pattern's groups; `toSafeName` turns every run of characters outside
  `[a-zA-Z0-9:_]` into one `_`; lowercased with `lowercaseOutputName`, label names with `lowercaseOutputLabelNames`);
  a rule's `value` replaces the attribute's (a string attribute needs one, else it is skipped); a rule without
  `name`, or no rules, gives the default naming `domain_<first property's value>_attribute`, the other properties as
  labels; beans outside `includeObjectNames`/`whitelistObjectNames` or inside the exclude list are not read. From
  1.0.1 on (`MatchedRule`, client_java's `sanitizeMetricName`) a name loses the suffixes `_total`, `_created`,
  `_bucket`, `_info`, and only a COUNTER gets `_total` back in the exposition.
- Strimzi metrics reporter (strimzi/metrics-reporter@7a14699, `KafkaMetricWrapper.prometheusName`, `KafkaCollector`,
  client_java 1.3.6): `<namespace>_<group>_<name>` (namespace `kafka_streams`, `kafka_consumer`, …; group the MBean's
  `type`), illegal characters to `_`, the same suffixes stripped, lowercased; the other tags as labels; a numeric
  value a gauge, any other an info series `<name>_info` with the value in a label named after the metric. No JMX:
  the JVM's `java.lang` beans are not published, its `process_*` series are (client_java's JvmMetrics).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import yaml

Sample = tuple[str, dict[str, str], float]
_TEMPLATE = re.compile(r"([\w.]+)<([^<>]*)><>([\w.-]+)$")
_RESERVED = ("_total", "_created", "_bucket", "_info")
_INTEGER = {"alive-stream-threads", "failed-stream-threads"}  # Kafka publishes these gauges as Integer


@dataclass(frozen=True)
class Bean:
    """One attribute of one MBean, its properties in the order Kafka registers them."""

    domain: str
    properties: tuple[tuple[str, str], ...]
    attribute: str
    value: float | int | str

    def match_name(self) -> str:
        props = ", ".join(f"{k}={v}" for k, v in self.properties)
        value = self.value if isinstance(self.value, str | int) else repr(float(self.value))  # Java's Double text
        return f"{self.domain}<{props}><>{self.attribute}: {value}"


def safe_name(name: str) -> str:
    """JmxCollector.toSafeName: runs of characters outside [a-zA-Z0-9:_] become one `_`."""
    out = re.sub(r"[^a-zA-Z0-9:_]+", "_", name)
    return re.sub(r"_+", "_", ("_" + out) if out[:1].isdigit() else out)


def strip_suffixes(name: str) -> str:
    """client_java's sanitizeMetricName: reserved suffixes removed until none is left."""
    while (end := next((s for s in _RESERVED if name.endswith(s) and name != s), None)) is not None:
        name = name[: -len(end)]
    return name


def beans(exposition: Path) -> tuple[list[tuple[float, str, list[Bean]]], list[tuple[float, str, list[Sample]]]]:
    """The MBeans behind each scrape of an exposition written in the default naming (each HELP line ends with its
    bean's template, `domain<k=..., …><>attribute`), and the samples of the exporter's own collectors (no template)."""
    templates: dict[str, tuple[str, list[str], str]] = {}
    scrapes: list[tuple[float, str, list[Bean]]] = []
    own: list[tuple[float, str, list[Sample]]] = []
    sample = re.compile(r"^(\w+)(?:\{(.*)\})? (\S+)$")
    label = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
    for line in exposition.read_text().splitlines():
        if line.startswith("# scrape"):
            _, _, t, pod = line.split()
            scrapes.append((float(t), pod, []))
            own.append((float(t), pod, []))
        elif line.startswith("# HELP"):
            name, help_text = line.split(" ", 3)[2:]
            if m := _TEMPLATE.search(help_text):
                templates[name] = (m.group(1), m.group(2).split(", "), m.group(3))
        elif not line.startswith("#"):
            m = sample.match(line)
            assert m, line
            name, labels, value = m.group(1), dict(label.findall(m.group(2) or "")), float(m.group(3))
            if name not in templates:
                own[-1][2].append((name, labels, value))
                continue
            domain, props, attribute = templates[name]
            properties = tuple((k, labels[safe_name(k)] if v == "..." else v)
                               for k, v in (p.split("=", 1) for p in props))
            scrapes[-1][2].append(Bean(domain, properties, attribute, int(value) if attribute in _INTEGER else value))
    return scrapes, own


def _object_name_matches(pattern: str, bean: Bean) -> bool:
    """An ObjectName pattern (`kafka.streams:*`, `kafka.consumer:type=*,id=*`) against the bean's name."""
    domain, _, props = pattern.partition(":")
    if not fnmatchcase(bean.domain, domain):
        return False
    wanted = [p for p in props.split(",") if p and p != "*"]
    have = dict(bean.properties)
    if "*" not in props.split(",") and len(wanted) != len(have):
        return False
    return all(k in have and fnmatchcase(have[k], v) for k, v in (p.split("=", 1) for p in wanted))


class RuleSet:
    """The JMX exporter's rule engine over one configuration (YAML text; empty: no rules, the default naming)."""

    def __init__(self, config: str, strip: bool = True) -> None:
        cfg: dict[str, Any] = yaml.safe_load(config) or {}
        self.lower_names = bool(cfg.get("lowercaseOutputName", False))
        self.lower_labels = bool(cfg.get("lowercaseOutputLabelNames", False))
        self.include = cfg.get("includeObjectNames", cfg.get("whitelistObjectNames")) or []
        self.exclude = cfg.get("excludeObjectNames", cfg.get("blacklistObjectNames")) or []
        self.rules = [(re.compile(f"^.*(?:{r['pattern']}).*$") if "pattern" in r else None, r)
                      for r in cfg.get("rules") or [{}]]
        self.strip = strip  # exporter 1.0.1 and later

    def _label(self, name: str) -> str:
        return safe_name(name).lower() if self.lower_labels else safe_name(name)

    def _default(self, bean: Bean) -> tuple[str, dict[str, str]]:
        name = safe_name(f"{bean.domain}_{bean.properties[0][1]}_{bean.attribute}")
        return (name.lower() if self.lower_names else name), {self._label(k): v for k, v in bean.properties[1:]}

    def publish(self, bean: Bean) -> Sample | None:
        if (self.include and not any(_object_name_matches(p, bean) for p in self.include)) or any(
                _object_name_matches(p, bean) for p in self.exclude):
            return None
        text = bean.match_name()
        for pattern, rule in self.rules:
            m = pattern.match(text) if pattern is not None else None
            if pattern is not None and m is None:
                continue

            def expand(template: Any, m: re.Match[str] | None = m) -> str:
                return re.sub(r"\$(\d+)", lambda g: (m.group(int(g.group(1))) or "") if m else "", str(template))

            if "value" in rule:
                try:
                    value = float(expand(rule["value"]))
                except ValueError:
                    return None
            elif isinstance(bean.value, str):
                return None
            else:
                value = float(bean.value)
            if "name" not in rule:
                name, labels = self._default(bean)
            else:
                name = safe_name(expand(rule["name"]))
                name = name.lower() if self.lower_names else name
                labels = {}
                for k, v in (rule.get("labels") or {}).items():
                    key, val = self._label(expand(k)), expand(v)
                    if key and val:
                        labels[key] = val
            if self.strip:
                name = strip_suffixes(name) + ("_total" if rule.get("type") == "COUNTER" else "")
            return name, labels, value
        return None


def strimzi_reporter(bean: Bean) -> Sample | None:
    """The Strimzi metrics reporter's series for a client's metric (None for what it does not publish)."""
    prefix = {"kafka.streams": "kafka_streams", "kafka.consumer": "kafka_consumer", "kafka.producer": "kafka_producer",
              "kafka.admin.client": "kafka_admin_client"}.get(bean.domain)
    if prefix is None:
        return None
    tags = dict(bean.properties)
    group = tags.pop("type")
    name = strip_suffixes(re.sub(r"[^a-zA-Z0-9_:]", "_", f"{prefix}_{group}_{bean.attribute}")).lower()
    labels = {re.sub(r"[^a-zA-Z0-9_]", "_", k): v for k, v in tags.items()}
    if isinstance(bean.value, str):
        return f"{name}_info", {**labels, re.sub(r"[^a-zA-Z0-9_]", "_", bean.attribute): bean.value}, 1.0
    return name, labels, float(bean.value)
