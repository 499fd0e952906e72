"""The preloaded process shares Prefect's verified TLS context between API clients, and only that one; it builds the
context of the CA file in use and the validators Prefect defers before any run, so that no run pays for them; a loop
run forked from it starts no suspension observer."""

from __future__ import annotations

import ssl
from pathlib import Path

import certifi
import pytest
from prefect.client import orchestration
from prefect.client.orchestration import PrefectClient
from prefect.settings import PREFECT_API_SSL_CERT_FILE, PREFECT_API_TLS_INSECURE_SKIP_VERIFY, temporary_settings

from daedalus.runtime.prefork import complete_models, share_tls_contexts, skip_suspension_observer

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


def test_a_run_whose_folder_the_stopping_worker_removed_exits_quietly(tmp_path: Path) -> None:
    # Found in an operator's hour: a run handed over as the worker stopped printed a FileNotFoundError traceback.
    import os
    import socket
    import sys

    from daedalus.runtime import prefork

    parent, child = socket.socketpair()
    stderr = tmp_path / "stderr"
    pid = os.fork()
    if pid == 0:  # the preloaded process's child, as the fork server makes it
        import atexit

        atexit._clear()  # the fork server has none of pytest's exit handlers (the Prefect harness removes its folder)
        os.dup2(os.open(stderr, os.O_WRONLY | os.O_CREAT), 2)
        sys.stderr = os.fdopen(2, "w")  # pytest's capture stands in for it here
        prefork._run_child(child, {"cwd": str(tmp_path / "gone"), "env": {}, "argv": []})
    child.close()
    assert prefork._recv(parent) == {"exit": 1}
    assert os.waitpid(pid, 0)[1] >> 8 == 1
    text = stderr.read_text()
    assert "the worker is stopping" in text and "Traceback" not in text


def test_a_loop_run_starts_no_suspension_observer(prefect_harness, monkeypatch: pytest.MonkeyPatch) -> None:
    # Known answer on Prefect's own engine and API: a deployment's run watches for a suspension from outside in a
    # thread of its own (with an events subscription); a run forked with NO_SUSPENSION_OBSERVER starts none.
    import threading
    from uuid import uuid4

    import prefect.flow_engine as engine
    from prefect import flow
    from prefect.client.orchestration import get_client

    monkeypatch.setattr(engine, "observe_flow_run_suspension", engine.observe_flow_run_suspension)  # put back after

    @flow
    def short() -> None: ...

    with get_client(sync_client=True) as client:
        run = client.create_flow_run(short).model_copy(update={"deployment_id": uuid4()})

    def observers() -> list[str]:
        with engine.FlowRunEngine(flow=short, flow_run=run).setup_flow_run_suspension_request():
            return [t.name for t in threading.enumerate() if "observer_thread" in t.name]

    assert len(observers()) == 1
    assert skip_suspension_observer()
    assert observers() == []
