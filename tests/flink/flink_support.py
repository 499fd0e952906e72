"""Shared pieces of the Flink tests: whether Flink, Java and Prometheus are here, and the JVMs left running."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from daedalus.models.errors import ConfigurationError


def _flink_installed() -> bool:
    from daedalus.runtime.flink import flink_home

    try:
        flink_home()
    except ConfigurationError:
        return False
    return shutil.which("java") is not None and shutil.which("javac") is not None


needs_flink = pytest.mark.skipif(not _flink_installed(), reason=(
    "Flink 2.3 or a JDK is missing: pip install --no-deps apache-flink==2.3.0 apache-flink-libraries==2.3.0 "
    "and apt-get install -y openjdk-17-jdk-headless"))
needs_prometheus = pytest.mark.skipif(shutil.which("prometheus") is None or shutil.which("promtool") is None,
                                      reason="prometheus/promtool not installed (apt-get install -y prometheus)")


def flink_jvms(marker: str) -> list[str]:
    """Command lines of running JVMs whose arguments mention `marker` (a cluster's folder)."""
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if "java" in line and marker in line]
