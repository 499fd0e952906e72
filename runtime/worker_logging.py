"""The worker's logging: Prefect's own configuration, with the websockets client's keepalive failures told as what
they are.

Prefect's worker and its flow runs keep websockets open to the server (events, logs, cancellation). When the server
is slow to answer a ping (a busy SQLite database, a machine at full CPU), the `websockets` library logs `ERROR
keepalive ping failed` with a full traceback, and Prefect's client reconnects by itself: nothing was lost, yet the
worker's log reads like a crash (64 of them in 20 minutes in issue 36). `daedalus worker` starts the Prefect worker
and the preloaded process with `PREFECT_LOGGING_SETTINGS_PATH` pointing at Prefect's `logging.yml` plus one filter
on the websockets loggers, which turns that record into one warning line. Every other record is left alone.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import yaml

SETTINGS_ENV = "PREFECT_LOGGING_SETTINGS_PATH"
KEEPALIVE = "keepalive ping failed"
LOGGERS = ("websockets.client", "websockets.asyncio.client", "websockets.legacy.client")


class KeepaliveFilter(logging.Filter):
    """A failed keepalive ping becomes one WARNING line that says the client reconnects (no traceback)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.getMessage() == KEEPALIVE:
            why = record.exc_info[1] if record.exc_info else None
            record.msg = (f"{KEEPALIVE} ({type(why).__name__ if why else 'no answer'}): the Prefect server was slow "
                          "to answer; the client reconnects by itself, nothing is lost")
            record.args = ()
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            record.exc_info, record.exc_text = None, None
        return True


def worker_logging_config() -> dict[str, Any]:
    """Prefect's default logging configuration with the filter on the websockets loggers."""
    import importlib.util

    spec = importlib.util.find_spec("prefect")  # where it is, without importing it (seconds on a busy machine)
    assert spec is not None and spec.origin is not None, "Prefect is not installed"
    config = yaml.safe_load((Path(spec.origin).parent / "logging" / "logging.yml").read_text())
    config.setdefault("filters", {})["keepalive"] = {"()": f"{__name__}.KeepaliveFilter"}
    for name in LOGGERS:
        config.setdefault("loggers", {})[name] = {"level": "INFO", "filters": ["keepalive"]}
    return config


def write_worker_logging(folder: Path) -> Path:
    """The configuration as a file for `PREFECT_LOGGING_SETTINGS_PATH`; returns its path."""
    path = folder / "logging.yml"
    path.write_text(yaml.safe_dump(worker_logging_config(), sort_keys=False))
    return path
