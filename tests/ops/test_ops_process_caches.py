"""What the preloaded process and the Prefect worker compute once instead of for every run: the verified TLS context
(shared between API clients, and only that one), the validators Prefect defers, the time zones on disk, the settings
as environment variables. Each is checked against Prefect's own result, and each cache's first test shows Prefect
computing it anew without it."""

from __future__ import annotations

import ssl
import zoneinfo
from pathlib import Path

import certifi
import pytest
from prefect._internal.schemas import validators
from prefect.client import orchestration
from prefect.client.orchestration import PrefectClient
from prefect.client.schemas.schedules import CronSchedule, IntervalSchedule
from prefect.settings import (
    PREFECT_API_SSL_CERT_FILE,
    PREFECT_API_TLS_INSECURE_SKIP_VERIFY,
    PREFECT_API_URL,
    Settings,
    get_current_settings,
    temporary_settings,
)
from prefect.types import _datetime
from prefect.workers.process import ProcessJobConfiguration

from daedalus.runtime.process_caches import (
    cache_settings_environment,
    cache_time_zones,
    complete_models,
    share_tls_contexts,
)

API = "http://127.0.0.1:9/api"


def tls_context(client: PrefectClient) -> ssl.SSLContext:
    return client._client._transport._pool._ssl_context  # the context httpx connects with


@pytest.fixture
def shared(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(orchestration, "ssl", orchestration.ssl)  # restored after the test
    share_tls_contexts()


def test_without_sharing_every_client_loads_the_ca_bundle_again() -> None:
    assert tls_context(PrefectClient(API)) is not tls_context(PrefectClient(API))


def test_clients_share_one_verified_context(shared: None) -> None:
    a, b = tls_context(PrefectClient(API)), tls_context(PrefectClient(API))
    assert a is b
    assert a.verify_mode == ssl.CERT_REQUIRED and a.check_hostname
    assert a.cert_store_stats()["x509_ca"] > 100  # certifi's bundle, loaded once


def test_another_ca_file_gets_its_own_context(shared: None, tmp_path: Path) -> None:
    bundle = tmp_path / "ca.pem"
    bundle.write_text(Path(certifi.where()).read_text())
    with temporary_settings({PREFECT_API_SSL_CERT_FILE: str(bundle)}):
        own = tls_context(PrefectClient(API))
        assert tls_context(PrefectClient(API)) is own
    assert tls_context(PrefectClient(API)) is not own


def test_the_insecure_context_prefect_modifies_is_never_shared(shared: None) -> None:
    with temporary_settings({PREFECT_API_TLS_INSECURE_SKIP_VERIFY: True}):
        a, b = tls_context(PrefectClient(API)), tls_context(PrefectClient(API))
    assert a is not b
    assert a.verify_mode == ssl.CERT_NONE and not a.check_hostname
    assert tls_context(PrefectClient(API)).verify_mode == ssl.CERT_REQUIRED  # the shared one was not touched


def test_the_ca_file_prefect_will_use_is_loaded_before_any_run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # Found by profiling a fleet's runs: Debian sets SSL_CERT_FILE, Prefect used that file, and the preloaded process
    # had loaded certifi's, so every run loaded its bundle again (about 15 ms of CPU each).
    bundle = tmp_path / "ca.pem"
    bundle.write_text(Path(certifi.where()).read_text())
    monkeypatch.setattr(orchestration, "ssl", orchestration.ssl)
    with temporary_settings({PREFECT_API_SSL_CERT_FILE: str(bundle)}):
        share_tls_contexts()
        loaded: list[object] = []
        real = ssl.create_default_context
        monkeypatch.setattr(ssl, "create_default_context", lambda *a, **k: loaded.append(k) or real(*a, **k))
        tls_context(PrefectClient(API))
    assert loaded == []


def test_the_validators_prefect_defers_are_built_before_any_run() -> None:
    import pydantic
    from prefect.client.schemas.objects import FlowRunPolicy

    class Deferred(pydantic.BaseModel):  # as Prefect declares its API schemas
        model_config = pydantic.ConfigDict(defer_build=True)
        loops: int

    assert not Deferred.__pydantic_complete__
    assert complete_models() >= 1
    assert Deferred.__pydantic_complete__ and FlowRunPolicy.__pydantic_complete__
    assert Deferred.model_validate({"loops": "3"}).loops == 3


# --- the time zones -------------------------------------------------------------------------------------------------

@pytest.fixture
def listings(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts Prefect's listings of the time-zone database; the validators' lookup is put back after the test."""
    counted: list[int] = []
    real = zoneinfo.available_timezones
    monkeypatch.setattr(_datetime, "available_timezones", lambda: counted.append(1) or real())
    monkeypatch.setattr(validators, "get_timezones", _datetime.get_timezones)
    return counted


def schedules() -> None:
    IntervalSchedule(interval=60, timezone="Europe/Berlin")
    CronSchedule(cron="* * * * *", timezone="America/New_York")


def test_without_the_cache_every_schedule_lists_the_time_zones(listings: list[int]) -> None:
    schedules()
    assert len(listings) == 2


def test_the_time_zones_are_listed_once(listings: list[int]) -> None:
    cache_time_zones()
    cache_time_zones()  # a second call does not wrap the cache again
    schedules()
    schedules()
    assert len(listings) == 1
    assert "Europe/Berlin" in validators.get_timezones()


def test_a_time_zone_not_on_disk_is_still_refused(listings: list[int]) -> None:
    cache_time_zones()
    with pytest.raises(ValueError, match='Invalid timezone: "Mars/Olympus_Mons"'):
        IntervalSchedule(interval=60, timezone="Mars/Olympus_Mons")


# --- the settings as environment variables --------------------------------------------------------------------------

@pytest.fixture
def serialised(monkeypatch: pytest.MonkeyPatch) -> list[dict]:
    """Counts Prefect serialising the settings into variables (with the arguments); put back after the test."""
    counted: list[dict] = []
    real = Settings.to_environment_variables
    monkeypatch.setattr(Settings, "to_environment_variables", lambda self, **kw: counted.append(kw) or real(self, **kw))
    return counted


def a_run_submitted() -> dict[str, str]:
    """The two serialisations of one run a worker submits: the job's base environment and the starting command's
    (prefect/runner/_starter_engine.py)."""
    base = ProcessJobConfiguration._base_environment()
    return {**base, **get_current_settings().to_environment_variables(exclude_unset=True)}


def test_without_the_cache_every_run_serialises_the_settings_twice(serialised: list[dict]) -> None:
    a_run_submitted()
    a_run_submitted()
    assert len(serialised) == 4


def test_the_settings_are_serialised_once_and_every_run_gets_them(serialised: list[dict]) -> None:
    with temporary_settings({PREFECT_API_URL: "http://127.0.0.1:4200/api"}):
        expected = get_current_settings().to_environment_variables(exclude_unset=True)
        expected_aliases = get_current_settings().to_environment_variables(include_aliases=True)
        serialised.clear()
        cache_settings_environment()
        cache_settings_environment()  # a second call does not wrap the cache again
        first = a_run_submitted()
        first["PREFECT_API_URL"] = "changed by one run"
        second = a_run_submitted()
        aliases = get_current_settings().to_environment_variables(include_aliases=True)
    assert serialised == [{"exclude_unset": True, "include_secrets": True, "include_aliases": False},
                          {"exclude_unset": False, "include_secrets": True, "include_aliases": True}]
    assert second == expected and second["PREFECT_API_URL"] == "http://127.0.0.1:4200/api"
    assert aliases == expected_aliases and aliases != expected


def test_new_settings_are_serialised_anew(serialised: list[dict]) -> None:
    cache_settings_environment()
    with temporary_settings({PREFECT_API_URL: "http://127.0.0.1:4200/api"}):
        assert a_run_submitted()["PREFECT_API_URL"] == "http://127.0.0.1:4200/api"
        with temporary_settings({PREFECT_API_URL: "http://10.0.0.7:4200/api"}):
            assert a_run_submitted()["PREFECT_API_URL"] == "http://10.0.0.7:4200/api"
        assert a_run_submitted()["PREFECT_API_URL"] == "http://127.0.0.1:4200/api"
    assert len(serialised) == 3
