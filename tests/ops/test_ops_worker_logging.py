"""The worker's logging (runtime/worker_logging.py): a failed websocket keepalive is one warning line, not an ERROR
with a traceback (issue 36); every other record is untouched."""

from __future__ import annotations

import io
import logging
import logging.config

from daedalus.runtime.worker_logging import KEEPALIVE, SETTINGS_ENV, write_worker_logging


def test_a_failed_keepalive_is_one_warning_line_and_other_records_are_untouched(tmp_path, monkeypatch):
    from prefect.logging.configuration import load_logging_config

    path = write_worker_logging(tmp_path)
    monkeypatch.setenv(SETTINGS_ENV, str(path))
    config = load_logging_config(path)  # as Prefect reads it: its own handlers and formatters, and the filter
    assert config["loggers"]["websockets.client"]["filters"] == ["keepalive"]
    assert "prefect.flow_runs" in config["loggers"] and "api" in config["handlers"]
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s - %(message)s"))
    logging.config.dictConfig({"version": 1, "disable_existing_loggers": False,
                               "filters": config["filters"], "handlers": {},
                               "loggers": {"websockets.client": config["loggers"]["websockets.client"]}})
    log = logging.getLogger("websockets.client")
    log.addHandler(handler)
    try:
        try:
            raise TimeoutError("no pong")
        except TimeoutError:
            log.error(KEEPALIVE, exc_info=True)
        log.error("connection closed: %s", "1011")
    finally:
        log.removeHandler(handler)
    lines = stream.getvalue().splitlines()
    assert lines == ["WARNING websockets.client - keepalive ping failed (TimeoutError): the Prefect server was slow "
                     "to answer; the client reconnects by itself, nothing is lost",
                     "ERROR websockets.client - connection closed: 1011"]
