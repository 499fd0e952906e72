"""Fixtures of the command-line tests: a jobs file of simulated jobs, a store folder, no Prefect API (no
command may start a temporary server), and no settings but the test's own: no DAEDALUS_* variable from the
environment, and a settings file of its own (never the user's ~/.config/daedalus/settings.toml)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from prefect.settings import PREFECT_API_URL, temporary_settings

from tests.ops.conftest import prefect_api_url, write_jobs  # noqa: F401 - a fixture shared with tests/ops


@pytest.fixture(autouse=True)
def no_prefect_api(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """No API configured, in the environment and in Prefect's settings context; no settings; wide lines for the
    tables."""
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    for name in [n for n in os.environ if n.startswith("DAEDALUS_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("DAEDALUS_SETTINGS", str(tmp_path / "settings.toml"))
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "prefect-home"))
    monkeypatch.setenv("COLUMNS", "250")
    with temporary_settings(restore_defaults={PREFECT_API_URL}):
        yield


@pytest.fixture
def jobs_file(tmp_path: Path) -> Path:
    """Two simulated jobs: one automatic, one waiting for approvals."""
    return write_jobs(tmp_path / "jobs.yaml", [{"name": "wordcount"}, {"name": "ads", "mode": "approve"}])


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    return str(tmp_path / "store")
