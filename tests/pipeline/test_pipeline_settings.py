"""Spark settings live in one place; the suite is declared once (no Spark needed)."""

from __future__ import annotations

import os

import pytest

from daedalus.connectors.spark import SparkSettings
from daedalus.models.errors import ConfigurationError
from daedalus.models.expectations import SuiteSettings, checks


def test_settings_come_from_defaults_then_environment_then_arguments(monkeypatch) -> None:
    monkeypatch.delenv("DAEDALUS_SPARK_MASTER", raising=False)
    monkeypatch.delenv("DAEDALUS_SPARK_NICE", raising=False)
    default = SparkSettings.from_env()  # half the cores, not all of them: the loops run beside it
    assert default.master == f"local[{max(1, (os.cpu_count() or 2) // 2)}]" and default.master != "local[*]"
    assert (default.driver_memory, default.nice) == ("1g", 10)
    monkeypatch.setenv("DAEDALUS_SPARK_NICE", "0")
    assert SparkSettings.from_env().nice == 0
    monkeypatch.setenv("DAEDALUS_SPARK_MASTER", "spark://10.0.0.5:7077")
    monkeypatch.setenv("DAEDALUS_SPARK_SHUFFLE_PARTITIONS", "64")
    settings = SparkSettings.from_env()
    assert (settings.master, settings.shuffle_partitions, settings.local) == ("spark://10.0.0.5:7077", 64, False)
    assert SparkSettings.from_env("local[2]").master == "local[2]"
    monkeypatch.setenv("DAEDALUS_SPARK_SHUFFLE_PARTITIONS", "many")
    with pytest.raises(ConfigurationError, match="DAEDALUS_SPARK_SHUFFLE_PARTITIONS must be an integer"):
        SparkSettings.from_env()


def test_the_session_is_built_for_many_jobs_on_one_interpreter() -> None:
    conf = SparkSettings(master="local[2]", conf={"spark.kubernetes.namespace": "streaming"}).spark_conf()
    assert conf["spark.sql.adaptive.enabled"] == "false"
    assert conf["spark.sql.session.timeZone"] == "UTC"
    assert conf["spark.executorEnv.OPENBLAS_NUM_THREADS"] == "1"
    assert conf["spark.driver.host"] == "127.0.0.1"
    assert conf["spark.kubernetes.namespace"] == "streaming"
    assert "spark.driver.host" not in SparkSettings(master="k8s://https://10.0.0.1:6443").spark_conf()
    with pytest.raises(ConfigurationError, match="Spark master 'mesos://x' is not understood"):
        SparkSettings(master="mesos://x")


def test_the_suite_names_each_check_once_and_uses_the_thresholds() -> None:
    suite = checks(SuiteSettings(max_gap_steps=7, throughput_tolerance=0.2))
    names = [c.name for c in suite]
    assert len(names) == len(set(names)) == 19
    by_name = {c.name: c for c in suite}
    assert by_name["no_gaps"].kwargs["max_value"] == 7.0
    assert by_name["throughput_within_supply"].kwargs["max_value"] == pytest.approx(1.2)
    assert by_name["cpu_in_range"].kwargs == {"column": "cpu", "min_value": 0.0, "max_value": 1.0}
    with pytest.raises(ValueError, match="max_gap_steps"):
        SuiteSettings(max_gap_steps=-1)


def test_an_empty_window_never_passes_and_says_where_the_lake_s_data_is() -> None:
    from daedalus.models.expectations import ValidationReport

    t0 = 1_767_225_600.0  # 2026-01-01 00:00:00 UTC
    behind = ValidationReport(t0, t0 + 900, (), newest_row=t0 - 86_400 - 7_200)
    assert behind.empty and not behind.passed
    assert behind.empty_reason().endswith(
        "the lake's newest row is at 2025-12-30 22:00:00 UTC, 1 d 2 h before the window's end.")
    ahead = ValidationReport(t0, t0 + 900, (), newest_row=t0 + 1_100, only=("ads",))
    assert ahead.empty_reason() == ("metric validation found no rows of ads in the window 2026-01-01 00:00:00 UTC – "
                                    "2026-01-01 00:15:00 UTC: the lake's newest row is at 2026-01-01 00:18:20 UTC, "
                                    "3 min 20 s after the window's end.")
    assert "the lake has no rows at all" in ValidationReport(t0, t0 + 900, ()).empty_reason()
    with pytest.raises(ValueError, match="transition_s"):
        SuiteSettings(transition_s=-1.0)


def test_what_a_started_process_writes_goes_to_the_log_and_this_process_keeps_its_own(tmp_path, capfd):
    import subprocess
    import sys

    from daedalus.connectors.spark import _output_to

    log = tmp_path / "logs" / "spark.log"
    with _output_to(str(log)):
        script = "echo out-of-the-jvm; echo err-of-the-jvm >&2; sleep 0.3; echo later >&2"
        child = subprocess.Popen(["sh", "-c", script])  # as a JVM: started inside, still writing after
    print("ours")
    print("ours too", file=sys.stderr)
    child.wait()
    out, err = capfd.readouterr()
    assert (out, err) == ("ours\n", "ours too\n")  # the child's lines, the late one included, are not on the terminal
    assert log.read_text().split() == ["out-of-the-jvm", "err-of-the-jvm", "later"]

