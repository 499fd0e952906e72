"""`daedalus exporter`: serve the loop's metrics from the knowledge store for Prometheus (runtime/exporter.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from daedalus.cli.common import console, fail
from daedalus.connectors.store import DEFAULT_URL
from daedalus.models.errors import DaedalusError
from daedalus.runtime.exporter import DEFAULT_PORT, serve


def exporter(
    store: Annotated[str, typer.Option("--store", help="Knowledge store URL (a folder by default)")] = DEFAULT_URL,
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="Port to serve /metrics on")] = DEFAULT_PORT,
    host: Annotated[str, typer.Option("--host", help="Address to bind (0.0.0.0 to be scraped from elsewhere)")]
    = "127.0.0.1",
    jobs_file: Annotated[Path | None, typer.Option("--jobs-file", help="Export only the jobs of this jobs file")]
    = None,
) -> None:
    """Serve every job's scale-out, decision, ledger and forecast for Prometheus until stopped (Ctrl-C, SIGTERM)."""
    try:
        serve(store, port, host, jobs_file,
              ready=lambda url: console.print(f"Serving {url} from {store}; scrape it with Prometheus", soft_wrap=True))
    except (OSError, DaedalusError) as exc:
        fail(exc)
