"""Publish: the loop run's reports, one task — the decision artifact every run; the job's status and forecast
record; with news, the capacity, forecast, ledger and forecast-plot artifacts (rendered by tasks/artifacts.py and
tasks/dashboards.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from prefect import task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from daedalus.connectors.clock import WALL
from daedalus.connectors.store import FORECASTS, STATUS, JobStore
from daedalus.models.forecast.versus import record_forecast
from daedalus.tasks.artifacts import artifact_key, decision_artifacts
from daedalus.tasks.dashboards import (
    NEWS_EVERY_S,
    PLOT_EVERY,
    forecast_plot_markdown,
    forecast_png,
    ledger_markdown,
    ledger_rows,
    status_record,
    verification_lines,
)

if TYPE_CHECKING:
    from daedalus.models.knowledge import Knowledge
    from daedalus.models.loop.iteration import Iteration


@task(name="publish", cache_policy=NO_CACHE)
def publish(it: Iteration, knowledge: Knowledge, store: JobStore, mode: str, stop: str | None,
                       version: int | None) -> None:
    """The decision artifact; status and forecast record; the other artifacts when there is news.

    News is an action, or every `PLOT_EVERY`th loop, and not within `NEWS_EVERY_S` of the last news: with a
    hundred jobs each artifact each minute would be the server's biggest write load.
    """
    job = knowledge.job
    wall = WALL.now()
    previous = store.status() or {}
    news = (knowledge.loops % PLOT_EVERY == 1 or it.action is not None) and \
        wall - float(previous.get("news_wall") or 0.0) >= NEWS_EVERY_S
    decision_artifacts(job, it.analysis, it.decision, it.action, version, news, verification_lines(knowledge))
    record = {**status_record(it, knowledge, mode, stop, wall),
              "news_wall": wall if news else previous.get("news_wall"),
              # which stored knowledge this status describes: `daedalus approve` trusts its pending proposal
              # only while no newer version exists (connectors/answers.py pending_proposal)
              "knowledge_version": version}
    history = record_forecast(store.read_json(FORECASTS), it.analysis.forecast)
    store.write_json(FORECASTS, history)
    store.write_json(STATUS, record)
    if record["ledger"] and record["ledger"] != previous.get("ledger"):
        create_markdown_artifact(key=artifact_key("ledger", job), markdown=ledger_markdown(job, ledger_rows(knowledge)),
                                 description=f"{job}: the scaling ledger, newest first")
    if news:
        png, w = forecast_png(job, knowledge, history, it.analysis.forecast)
        create_markdown_artifact(key=artifact_key("forecast-plot", job),
                                 markdown=forecast_plot_markdown(job, png, w, it.analysis.forecast),
                                 description=f"{job}: the workload that arrived against the forecast")
