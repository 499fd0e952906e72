"""A run forked from the preloaded process exits quietly when its folder is gone and, for a loop, starts no suspension
observer (what the preloaded process computes once for every run: test_ops_process_caches.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from daedalus.runtime.prefork import skip_suspension_observer


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
