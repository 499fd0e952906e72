"""`daedalus explain`: one block per rescale, per SLO breach and per costliest stretch of a simulated run or a
backtest, and per rescale of a live job."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from daedalus.cli.common import console, fail
from daedalus.models.errors import DaedalusError


def explain(
    report: Annotated[Path | None, typer.Argument(help="A `simulate --json` or `backtest --json` report")] = None,
    store: Annotated[str | None, typer.Option(help="A knowledge store URL: explain a live job's ledger")] = None,
    job: Annotated[str | None, typer.Option(help="The job whose ledger to explain (with --store)")] = None,
) -> None:
    """Why each rescale happened, what each breach of the SLO followed and why the costliest stretches held their
    scale-out: the forecast and its band, the capacity estimated and true, the schedules priced and why the chosen
    one won."""
    from daedalus.bench.explain import explain_file, ledger_blocks

    if (report is None) == (store is None) or (store is None) != (job is None):
        fail(DaedalusError("give a report (simulate or backtest --json), or --store URL with --job NAME"))
    try:
        if report is not None:
            blocks = explain_file(report)
        else:
            from daedalus.connectors.store import Store

            assert store is not None and job is not None
            knowledge = Store(store).job(job).load().knowledge
            if knowledge is None:
                raise DaedalusError(f"nothing stored for job {job!r} in {store}")
            blocks = ledger_blocks(job, knowledge.ledger)
    except (OSError, ValueError, KeyError, DaedalusError) as exc:
        fail(exc)
    for block in blocks:
        console.print(block, soft_wrap=True, markup=False, highlight=False)
