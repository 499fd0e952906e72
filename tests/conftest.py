"""Shared fixtures: the shipped data (data/) and one Prefect test harness per session."""

from __future__ import annotations

import atexit
import importlib.machinery
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from daedalus.data import DATA

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
# pytest-xdist's workers start with COLUMNS=80, and a rich Console fixes its width when it is made (at import): a
# test sets the width it needs itself, as it would in a serial run.
os.environ.pop("COLUMNS", None)
# An xdist worker runs as `python -c`, whose __main__ has neither __spec__ nor __file__; pyspark.sql.connect (which
# Great Expectations imports) takes that for a doctest run and calls sys.exit(0). A spec named __main__ tells it
# otherwise, and multiprocessing's spawn then re-imports nothing as the main module (it skips "__main__").
if os.environ.get("PYTEST_XDIST_WORKER"):
    _main = sys.modules["__main__"]
    if getattr(_main, "__spec__", None) is None and not hasattr(_main, "__file__"):
        _main.__spec__ = importlib.machinery.ModuleSpec("__main__", None)
# No test reads or writes the user's settings (~/.config/daedalus/settings.toml, ./daedalus.toml) or takes one of
# the commands' settings from the shell that runs it (cli/settings.py); subprocesses inherit this.
for _name in ("DAEDALUS_STORE", "DAEDALUS_JOBS_FILE", "DAEDALUS_LAKE", "DAEDALUS_POOL", "DAEDALUS_OPERATOR"):
    os.environ.pop(_name, None)
_SETTINGS_DIR = tempfile.mkdtemp(prefix="daedalus-settings-")


@atexit.register
def _remove_settings_dir(pid: int = os.getpid()) -> None:
    """One run must not leave a folder behind; a forked child running the exit handlers must not take it away."""
    if os.getpid() == pid:
        shutil.rmtree(_SETTINGS_DIR, ignore_errors=True)


os.environ["DAEDALUS_SETTINGS"] = os.path.join(_SETTINGS_DIR, "settings.toml")

@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The traces and recorded metrics that ship with the project (data/)."""
    return DATA


@pytest.fixture(scope="session")
def prefect_harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A temporary Prefect API (SQLite) for flow tests; about 15 s to start on 2 cores."""
    from prefect.testing.utilities import prefect_test_harness

    os.environ["PREFECT_HOME"] = str(tmp_path_factory.mktemp("prefect-home"))
    with prefect_test_harness(server_startup_timeout=120):
        yield
        drop_undeliverable(DELIVER_S)  # before the harness drains them without a time limit


DELIVER_S = 60.0


def drop_undeliverable(timeout_s: float) -> None:
    """Deliver the events and logs Prefect still queues within `timeout_s`, then drop the rest.

    Prefect retries each queued item on its own, about 7 s apiece, and waits for all of them at exit. An item for a
    server that has gone (a test's own server, stopped; one that died on a loaded machine) would then hold the
    test run for hours: a CI run hung 50 minutes with 1,100 events for a server no longer there.
    """
    import queue
    import sys

    if "prefect" not in sys.modules:
        return
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    for service in (EventsWorker, APILogWorker):
        instances = tuple(service._instances.values())
        service.drain_all(timeout=timeout_s, at_exit=False)
        for instance in instances:  # what is left is for a server that does not answer
            while True:
                try:
                    instance._queue.get_nowait()
                except queue.Empty:
                    break
            instance._queue.put_nowait(None)  # the service's loop ends after the item in flight


@pytest.fixture(autouse=True)
def _prefect_events_follow_the_api() -> Iterator[None]:
    """Each test ends by delivering the events and logs it queued (dropping what cannot be delivered).

    Prefect's one events worker (and log worker) per process is bound to the API in force when it starts. A test
    that ran flows in this process against a server of its own would leave it bound to that server once stopped,
    and every later test's task runs would be sent there, never to be recorded (a CI run: no task run of the
    flow test's 60 runs reached the harness). Drained, the next test starts a worker for its own API.
    """
    yield
    drop_undeliverable(DELIVER_PER_TEST_S)


DELIVER_PER_TEST_S = 15.0


def pytest_sessionfinish(session: pytest.Session) -> None:
    drop_undeliverable(DELIVER_S)


# Tests that read a real engine's capacity run alone, before the rest (`make test` runs `-m engine` in one process, then
# `-m "not engine"` on four xdist workers): an engine's capacity measured while another test saturates the other core
# of a 2-core machine reads low (the Spark end-to-end test's second slot added nothing while the other worker ran:
# 3,989 against 3,999 rows/s). The other tests that start an engine read no capacity and run with the rest: the user's
# Spark job rescaled by its submit command, the Flink faults (a killed TaskManager, a resubmitted job) and the Flink
# runtime's own tests (each cluster picks its ports free, so two at once do not meet).
ENGINE_TESTS = ("tests/flink/test_flink_e2e.py", "tests/connectors/test_connectors_spark_e2e.py")


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """`-m engine` alone (the first step of `make test`) imports only the engine tests' modules: importing all the
    others only to deselect them cost that step about 7 s."""
    path = collection_path
    if config.getoption("markexpr") != "engine" or path.suffix != ".py" or not path.name.startswith("test_"):
        return None
    return not path.relative_to(config.rootpath).as_posix().startswith(ENGINE_TESTS) or None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    root = Path(str(config.rootpath))
    for item in items:
        where = Path(str(item.path)).relative_to(root).as_posix()
        if where.startswith(ENGINE_TESTS):
            item.add_marker(pytest.mark.engine)
    # The longest modules first, then the others that start servers, then the rest, each module kept whole and in its
    # order: xdist (`--dist loadscope --no-loadscope-reorder`) hands modules out in this order, so the long ones start
    # together and the many short ones fill the gaps, instead of a long one starting last and ending the run alone.
    slow = {item.path for item in items if item.get_closest_marker("slow")}

    def order(item: pytest.Item) -> tuple[int, int]:
        where = Path(str(item.path)).relative_to(root).as_posix()
        longest = next((i for i, prefix in enumerate(LONGEST) if where.startswith(prefix)), None)
        return (0, longest) if longest is not None else (1, 0) if item.path in slow else (2, 0)

    items.sort(key=order)


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """`--dist loadscope` with the modules of `SHARED_SESSIONS` as one unit: they share one Spark session and one
    Prefect harness (session fixtures), which each worker would otherwise start for itself (20–50 CPU-s apiece)."""
    if config.getoption("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SharedSessions(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return "shared-sessions" if nodeid.startswith(SHARED_SESSIONS) else super()._split_scope(nodeid)

    return SharedSessions(config, log)


# The pipeline's modules (Spark and the harness) and the short ones that use the harness; the fault injection (about
# 3 minutes) uses it too but would make the unit the run's end.
SHARED_SESSIONS = ("tests/pipeline/", "tests/flows/test_flow.py", "tests/cli/test_cli_step.py",
                   "tests/connectors/test_connectors_prometheus_auth.py")

# The units of several minutes each, the longest first (a worker takes the next unit when it is free, so the last to
# start ends the run): the fleet's fault run (tests/runtime/test_chaos.py, about 5 minutes of faults on a real
# fleet; started fifth, at 210 s, it ended a four-worker run alone 70 s after the others), the operator's scenario
# (one-minute schedules and a two-minute expiry, about 4 minutes), the user's Spark job (submitted three times and
# drained, about 3½ minutes), the late answer's scenario (a one-minute expiry, about 2½ minutes) and the shared unit
# (about 4–5 minutes of short modules).
LONGEST = ("tests/runtime/test_chaos.py", "tests/ops/test_ops_prefect.py",
           "tests/connectors/test_connectors_spark_user_job_e2e.py", "tests/ops/test_ops_answer.py", *SHARED_SESSIONS)
