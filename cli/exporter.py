"""`daedalus exporter`: serve the loop's metrics from the knowledge store for Prometheus (runtime/exporter.py)."""

from __future__ import annotations

from typing import Annotated

import typer

from daedalus.cli.common import JobsFile, Store, console, fail
from daedalus.cli.settings import resolve
from daedalus.connectors import store as job_store
from daedalus.models.errors import DaedalusError
from daedalus.runtime.exporter import DEFAULT_PORT, serve


def exporter(
    store: Store = None,
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="Port to serve /metrics on")] = DEFAULT_PORT,
    host: Annotated[str, typer.Option("--host", help="Address to bind (0.0.0.0 to be scraped from elsewhere)")]
    = "127.0.0.1",
    jobs_file: JobsFile = None,
) -> None:
    """Serve every job's scale-out, decision, ledger and forecast for Prometheus until stopped (Ctrl-C, SIGTERM).

    The store and the jobs file are the settings in force, as for every command; with a jobs file, only its jobs
    are exported.
    """
    try:
        resolved = resolve(store=store, jobs_file=jobs_file)
        settings, where = resolved.settings, f"{resolved.settings.store} ({resolved.sources['store']})"
        if not job_store.Store(settings.store).exists():
            console.print(f"[yellow]note:[/yellow] the store {where} does not exist yet: daedalus_exporter_store_up "
                          "is 0 until a loop writes to it (`daedalus config` shows the settings in force)",
                          soft_wrap=True)
        serve(settings.store, port, host, settings.jobs_file,
              ready=lambda url: console.print(f"Serving {url} from {where}; scrape it with Prometheus",
                                              soft_wrap=True))
    except (OSError, DaedalusError) as exc:
        fail(exc)
