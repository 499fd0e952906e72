"""The dashboards as an operator sees them (issue 14 item 5): every artifact a loop publishes, and the fleet
overview, opened on its page of a real Prefect server's UI in headless Chromium at 1,400 px.

The page is driven over the Chrome DevTools protocol. Each check reads the rendered page: its text, and the
bounding boxes of the table's header cells, so a column that matters (health, the recommendation, capacity,
recovery, the reason) must be inside the window without scrolling sideways. Each page is also saved as a
screenshot next to the test's temporary files (`screenshots/`), for a person to look at.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from daedalus.connectors.clock import WALL
from daedalus.connectors.store import FORECASTS, Store
from daedalus.models.types import LedgerEntry
from daedalus.runtime.local_prefect import LocalPrefect, start_server
from tests.ops import devtools
from tests.ops.conftest import T0, write_jobs
from tests.ops.test_ops_dashboards import _iterations

pytestmark = pytest.mark.slow

WIDTH = 1400
INF = re.compile(r"\binf\b|\bnan\b", re.IGNORECASE)  # what Python prints for a float it should not have shown
# A job name as operators write them (the operator's second hour: with 23 characters the fleet table's decision
# column lay past the window's edge).
LONG_JOB = "clickstream-sessionizer-eu-west"
LONG_REASON = ("forecast over 1800 s (arima): peak 1,141,070 tuples/s, upper band 1,278,555 tuples/s (z = 1.5); "
               "C_8 = 905,000 tuples/s would not drain the backlog within the latency budget of 48 s")


@dataclass
class UI:
    server: LocalPrefect
    ws_url: str  # the DevTools WebSocket of the browser's page
    shots: Path

    def page(self, path: str, expect: str, name: str) -> dict[str, Any]:
        """Open `path` of the UI, wait for `expect` in its text, save a screenshot, and return what the page
        shows: its text, the header cells of its table with their boxes, its images and the window's width."""
        return asyncio.run(_inspect(self.ws_url, f"{self.server.ui_url}{path}", expect, self.shots / f"{name}.png"))

    def artifact(self, key: str, expect: str) -> dict[str, Any]:
        """The page of the newest artifact with this key: what an operator opens from the key's timeline."""
        query = json.dumps({"artifacts": {"key": {"any_": [key]}}, "sort": "CREATED_DESC", "limit": 1}).encode()
        request = urllib.request.Request(f"{self.server.api_url}/artifacts/filter", data=query,
                                         headers={"content-type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as r:
            (newest,) = json.load(r)
        return self.page(f"/artifacts/artifact/{newest['id']}", expect, key)


async def _inspect(ws_url: str, url: str, expect: str, shot: Path, timeout_s: float = 90.0) -> dict[str, Any]:
    async with devtools.page(ws_url) as p:
        await p.call("Emulation.setDeviceMetricsOverride", width=WIDTH, height=1600, deviceScaleFactor=1, mobile=False)
        await p.call("Page.navigate", url=url)
        deadline = time.monotonic() + timeout_s
        text = ""
        while time.monotonic() < deadline and expect not in text:
            await asyncio.sleep(0.5)
            text = await p.js("document.body ? document.body.innerText : ''") or ""
        await asyncio.sleep(1.0)  # tables and images settle after the text arrives
        seen = await p.js("""(() => {
            const box = e => { const r = e.getBoundingClientRect(); return {left: r.left, right: r.right,
                                                                            width: r.width}; };
            const table = document.querySelector('table');
            // The box the table is shown in: its nearest ancestor that clips it (the UI puts a table between its
            // menu and its details panel, about 850 px wide at 1,400 px).
            let clip = table && table.parentElement;
            while (clip && clip !== document.body && getComputedStyle(clip).overflowX === 'visible') {
                clip = clip.parentElement;
            }
            return {
                text: document.body.innerText,
                width: window.innerWidth,
                pageScrollWidth: document.documentElement.scrollWidth,
                shown: clip ? box(clip) : null,
                headers: table ? [...table.querySelectorAll('th')].map(th => ({text: th.innerText.trim(),
                                                                               ...box(th)})) : [],
                overflowing: !!clip && clip.scrollWidth > clip.clientWidth,
                cells: table && table.querySelector('tbody tr') ? Object.fromEntries(
                    [...table.querySelectorAll('th')].map((th, i) => [th.innerText.trim(),
                        box(table.querySelector('tbody tr').children[i])])) : {},
                images: [...document.querySelectorAll('img')].filter(i => i.src.startsWith('data:image/png'))
                    .map(i => ({natural: i.naturalWidth, ...box(i)})),
                // A markdown artifact's column (its title's box) and its list items, each with whether it overflows.
                column: (() => { const h = document.querySelector('h1'); return h ? box(h) : null; })(),
                items: (() => { const h = document.querySelector('h1');
                    return h ? [...h.parentElement.querySelectorAll('li')].map(li => ({
                        text: li.innerText, overflowing: li.scrollWidth > li.clientWidth, ...box(li)})) : []; })(),
            };
        })()""")
        png = await p.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        shot.parent.mkdir(parents=True, exist_ok=True)
        shot.write_bytes(base64.b64decode(png["data"]))
        return seen


def _publish(store: str, jobs_file: Path) -> None:
    """What eleven loops of a simulated job publish (its eleventh has news), with a ledger whose newest entry
    has a long reason and an unbounded predicted recovery; then the fleet overview over four jobs."""
    from prefect import flow

    from daedalus.flows.dashboards import fleet_overview
    from daedalus.tasks.publish import publish

    @flow(name="ui-check")
    def loop_run() -> None:
        k, its, history = _iterations(11)
        k.record(LedgerEntry("sim-1767226200", T0 + 600, 8, 10, "scale-out", (LONG_REASON,), "executed",
                             float("inf"), None, "", [(T0 + 600, "executed")], operator="alice",
                             events=[(T0 + 600, "proposed"), (T0 + 717, "approved by alice"),
                                     (T0 + 720, "executed")]))
        sim = Store(store).job("sim")
        sim.write_json(FORECASTS, history[:-1])
        publish(its[-1], k, sim, "auto", None, 11)

    loop_run()
    now = WALL.now()
    base = {"wall": now, "mode": "auto", "kind": "no-change", "last_action": None, "pending": None}
    Store(store).job("ads").write_json("status.json", {**base, "current": 6, "recommended": 9, "kind": "scale-out",
               "health": "quarantined: metric validation failed: cpu_in_range (CPU load within [0, 1]) for 3 rows "
                         "in the last 15 minutes", "pending": {"id": "ads-1767226200", "from": 6, "to": 9}})
    Store(store).job(LONG_JOB).write_json("status.json", {**base, "current": 4, "recommended": 4,
                                                "health": "paused (kill switch for this job)"})
    fleet_overview(jobs_file=str(jobs_file), store_url=store)
    _publish_backtest(jobs_file.parent / "lake")


def _publish_backtest(lake_dir: Path) -> None:
    """What the `backtest` flow publishes for a job that ran 75 minutes under DS2: its table, Pareto plot and fitted
    capacities (the replay itself, without Spark: the flow's reading is tested in tests/pipeline)."""
    from prefect import flow

    from daedalus.bench.backtest import record_history
    from daedalus.connectors.lake import Lake
    from daedalus.connectors.replay import replay
    from daedalus.sim.workloads import sine_workload
    from daedalus.tasks.backtest import publish

    lake = Lake(str(lake_dir))
    record_history(lake, "sim", sine_workload(hours=1.25, period_s=3600), policy="ds2")

    @flow(name="backtest-check")
    def backtest_run() -> None:
        publish(replay("sim", lake.read("sim"), ["ds2", "flink-autoscaler", "static"]))

    backtest_run()


@pytest.fixture(scope="module")
def ui(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UI]:
    from prefect.settings import PREFECT_API_URL, temporary_settings

    root = tmp_path_factory.mktemp("ops-ui")
    jobs_file = write_jobs(root / "jobs.yaml", [{"name": n} for n in ("sim", "ads", LONG_JOB, "orders")],
                           defaults={"scaleout": {"min": 1, "max": 12}})
    server = start_server(root / "prefect")
    try:
        with temporary_settings(updates={PREFECT_API_URL: server.api_url}):
            _publish(str(root / "store"), jobs_file)
        with devtools.headless_chromium(root, WIDTH, 1600) as ws_url:
            yield UI(server, ws_url, root / "screenshots")
    finally:
        server.stop()


def visible(page: dict[str, Any], *columns: str) -> None:
    """Each column's header cell lies inside the box the table is shown in, and that box inside the window: no
    sideways scrolling to read it."""
    shown = page["shown"]
    assert shown is not None and shown["right"] <= page["width"], f"no table shown in the window: {shown}"
    headers = {h["text"]: h for h in page["headers"]}
    for column in columns:
        assert column in headers, f"no column {column!r} in {list(headers)}"
        assert shown["left"] <= headers[column]["left"] and headers[column]["right"] <= shown["right"] + 1, \
            f"column {column!r} at {headers[column]} lies outside the table's {shown} px"
    assert page["pageScrollWidth"] <= page["width"], "the page itself scrolls sideways"


def test_the_fleet_overview_shows_health_and_the_recommendation_first(ui):
    page = ui.artifact("fleet-overview", "quarantined")
    visible(page, "job", "health", "scale-out", "mode", "decision")
    assert [h["text"] for h in page["headers"]][:3] == ["job", "health", "scale-out"]
    text = page["text"]
    assert "paused (kill switch for this job)" in text and "6 → 9" in text and "no loop has run yet" in text
    assert "…" in text  # the long quarantine reason is cut in the cell, not widening the table


def test_the_capacity_table_names_its_columns_for_people_and_formats_its_numbers(ui):
    page = ui.artifact("capacity-sim", "capacity (tuples/s)")
    visible(page, "scale-out", "now / recommended", "capacity (tuples/s)", "predicted recovery", "capacity from")
    assert not page["overflowing"], "the capacity table scrolls sideways"
    text = page["text"]
    assert "capacity (tuples/s) and recovery per scale-out" in text  # the description, short enough for its card
    assert not INF.search(text) and "capacity_per_s" not in text
    assert any("," in line and line.strip()[0].isdigit() for line in text.splitlines())  # 123,456


def test_the_ledger_fits_the_window_and_reads_reasons_whole(ui):
    # Issue 25: as a table its last two columns sat behind a sideways scroll bar and the reason was cut at about 30
    # characters (the UI draws markdown tables' cells on one line too): a block per entry, whose lines wrap.
    page = ui.artifact("ledger-sim", "predicted / observed recovery")
    column, items = page["column"], page["items"]
    assert column is not None and column["right"] <= page["width"] and page["pageScrollWidth"] <= page["width"]
    fields = {item["text"].split(":")[0] for item in items}
    assert {"what happened", "predicted / observed recovery", "reason"} <= fields
    for item in items:
        assert not item["overflowing"] and item["right"] <= column["right"] + 1, f"{item} lies outside {column}"
    text = " ".join(page["text"].split())
    assert LONG_REASON in text and "never / —" in text and not INF.search(text)
    assert "proposed 00:10:00 → approved by alice 00:11:57 → executed 00:12:00" in text
    assert "the scaling ledger, newest first" in text


def test_the_decision_says_what_to_act_on_first(ui):
    page = ui.artifact("decision-sim", "Reasons")
    text = page["text"]
    assert "recommended scale-out" in text and "the loop's last decision" in text and not INF.search(text)
    assert "forecast peak of the next 30 min" in text  # the horizon the forecaster has, named one way
    assert page["pageScrollWidth"] <= page["width"]


def test_the_forecast_plot_is_large_enough_to_read(ui):
    page = ui.artifact("forecast-plot-sim", "forecast against actual")
    (image,) = page["images"]
    # As wide as the artifact's column (about 850 px), never blown up: fonts of 15 px and more on screen.
    assert image["width"] >= 800 and image["natural"] >= image["width"] and image["right"] <= page["width"]
    assert "arrived against the forecast" in page["text"] and "peak of the next 30 min" in page["text"]


def test_the_forecast_summary_formats_its_numbers(ui):
    page = ui.artifact("forecast-sim", "WAPE of the previous forecast")
    assert "tuples/s" in page["text"] and "how the workload forecast is made" in page["text"]


def test_the_backtest_shows_its_table_and_a_pareto_plot_large_enough_to_read(ui):
    page = ui.artifact("backtest-sim", "Backtest of sim")
    visible(page, "policy", "worker-hours", "% of actual", "s over SLO", "rescales", "p95 latency")
    assert not page["overflowing"], "the backtest table scrolls sideways"
    (image,) = page["images"]
    assert image["width"] >= 800 and image["natural"] >= image["width"] and image["right"] <= page["width"]
    text = page["text"]
    assert "actual" in text and "flink-autoscaler" in text and "Never observed (extrapolated)" in text
    assert not INF.search(text)


@pytest.mark.parametrize(("key", "says"), [
    ("decision-sim", "sim: the loop's last decision"), ("capacity-sim", "sim: capacity (tuples/s)"),
    ("ledger-sim", "sim: the scaling ledger"), ("forecast-plot-sim", "sim: the workload that arrived"),
    ("forecast-sim", "sim: how the workload forecast is made")])
def test_each_key_page_says_what_the_artifact_is(ui, key, says):
    page = ui.page(f"/artifacts/key/{key}", says, f"key-{key}")
    assert says in page["text"]
