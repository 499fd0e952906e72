"""An operator answers a proposal through the Prefect UI's resume form (issue 36), on a real Prefect server (SQLite,
loopback) and a real `daedalus worker`, in headless Chromium at 1,400 × 1,000 px driven over the DevTools protocol.

The form must show the proposal, why now and the capacity per scale-out readably: no heading as large as the
dialog's title, and no box inside the dialog that scrolls on its own (the dialog itself may scroll). The operator
has no default (Prefect's open-source UI has no logged-in user): submitting without one is refused (the form's
schema requires it) and the run stays suspended. With a name and a reason it resumes the run, and the answer
reaches the job's inbox dated when it was given, with who and why. The dialog is saved as a screenshot
(`screenshots/`) for a person.
"""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from daedalus.connectors.jobs import load_jobs
from daedalus.connectors.store import Store
from daedalus.runtime.local_prefect import start_server
from tests.helpers import DAEDALUS
from tests.ops import devtools
from tests.ops.conftest import with_proposal, write_jobs
from tests.ops.test_ops_prefect import wait_for

pytestmark = pytest.mark.slow

WIDTH, HEIGHT = 1400, 1000
POOL = "approval-ui"

# The dialog as the page lays it out: its title, the description's first heading (none expected), every element
# inside the dialog that scrolls by itself, its text, and whether the operator field starts empty.
FIELD = """// The input of the form field labelled `label` (the schema form's "Operator", "Reason (Optional)").
var field = (body, label) => {  // var: every script the page evaluates declares it again
    const property = [...body.querySelectorAll('.schema-form-property')].find(p => {
        const l = p.querySelector('.schema-form-property__label');
        return l && l.textContent.replace('(Optional)', '').trim() === label;
    });
    return property ? property.querySelector('textarea, input') : null;
};
"""
SEEN = FIELD + """(() => {
    const card = document.querySelector('.p-modal__card');
    if (!card) return null;
    const body = card.querySelector('.p-modal__body');
    const title = card.querySelector('.p-modal__title');
    const h = body.querySelector('h1, h2, h3');
    const scrolling = [...body.querySelectorAll('*')].filter(e => {
        const s = getComputedStyle(e);
        return /(auto|scroll)/.test(s.overflowY + s.overflowX) &&
               (e.scrollHeight > e.clientHeight + 1 || e.scrollWidth > e.clientWidth + 1);
    }).map(e => e.className);
    const operator = field(body, 'Operator');
    return {text: body.innerText, title: parseFloat(getComputedStyle(title).fontSize),
            heading: h ? parseFloat(getComputedStyle(h).fontSize) : null, scrolling,
            width: card.getBoundingClientRect().width, operator: operator ? operator.value : null};
})()"""



async def _open_form(p: devtools.Page, url: str) -> dict[str, Any]:
    await p.call("Page.navigate", url=url)
    for _ in range(120):
        await asyncio.sleep(0.5)
        if await p.js("[...document.querySelectorAll('button')].some(b => b.innerText.trim() === 'Resume')"):
            break
    await p.js("[...document.querySelectorAll('button')].find(b => b.innerText.trim() === 'Resume').click()")
    seen = None
    for _ in range(60):
        await asyncio.sleep(0.5)
        seen = await p.js(SEEN)
        if seen and "Capacity per scale-out" in seen["text"]:
            break
    return seen or {}


async def _answer_through_the_form(ws_url: str, url: str, shots: Path, api_url: str, run_id: str
                                   ) -> tuple[dict[str, Any], str, float]:
    """Open the form, look at it, submit it without an operator (refused), then with one; the run's state after the
    refusal and the wall time of the answer."""
    async with devtools.page(ws_url) as p:
        await p.call("Emulation.setDeviceMetricsOverride", width=WIDTH, height=HEIGHT, deviceScaleFactor=1,
                     mobile=False)
        seen = await _open_form(p, url)
        shot = await p.call("Page.captureScreenshot", format="png")
        shots.mkdir(parents=True, exist_ok=True)
        (shots / "resume-form.png").write_bytes(base64.b64decode(shot["data"]))
        assert await _type(p, "Reason", "peak at noon") == "peak at noon"
        await _submit(p)  # no operator
        await asyncio.sleep(3)
        given = time.time()
        still = _run(api_url, run_id)["state"]["type"]
        if not await p.js("!!document.querySelector('.p-modal__body')"):  # the dialog closed on the refusal
            await _open_form(p, url)
            await _type(p, "Reason", "peak at noon")
        assert await _type(p, "Operator", "alice") == "alice"
        await _submit(p)
        await asyncio.sleep(3)
        return seen, still, given


async def _type(p: devtools.Page, label: str, text: str) -> str:
    """Click into the dialog's field labelled `label` and type `text` as a person does (trusted mouse and key input,
    which the UI's form binds to); the field's value afterwards."""
    where = await p.js(f"""{FIELD}(() => {{
        const el = field(document.querySelector('.p-modal__body'), {label!r});
        if (!el) return null;
        el.scrollIntoView({{block: 'center'}});
        const r = el.getBoundingClientRect();
        return [r.x + r.width / 2, r.y + r.height / 2];
    }})()""")
    assert where is not None, f"no field labelled {label!r} in the dialog"
    for kind in ("mousePressed", "mouseReleased"):
        await p.call("Input.dispatchMouseEvent", type=kind, x=where[0], y=where[1], button="left", clickCount=1)
    await p.call("Input.insertText", text=text)
    await asyncio.sleep(0.3)
    return await p.js(f"{FIELD}field(document.querySelector('.p-modal__body'), {label!r}).value")


async def _submit(p: devtools.Page) -> None:
    await p.js("[...document.querySelectorAll('.p-modal__card button')].find(b => b.innerText.trim() === 'Submit')"
               ".click()")


def _run(server_api: str, run_id: str) -> dict[str, Any]:
    return httpx.get(f"{server_api}/flow_runs/{run_id}", timeout=30).json()


def test_an_operator_answers_a_proposal_through_the_ui_form(tmp_path):
    jobs_file = write_jobs(tmp_path / "jobs.yaml", [{"name": "payments", "mode": "approve"}],
                           defaults={"scaleout": {"min": 1, "max": 12}})
    store = str(tmp_path / "store")
    spec = load_jobs(jobs_file).job("payments")
    k = with_proposal(spec, store, current=4, target=6, created=time.time(), ttl=1200.0)
    server = start_server(tmp_path / "prefect")
    try:
        env = server.env()
        deploy = subprocess.run([DAEDALUS, "deploy", str(jobs_file), "--pool", POOL, "--store", store, "--no-lake",
                                 "--no-background"], env=env, capture_output=True, text=True, timeout=300)
        assert deploy.returncode == 0, deploy.stderr + deploy.stdout
        deployments = httpx.post(f"{server.api_url}/deployments/filter", json={}, timeout=30).json()
        for d in deployments:  # no loop meanwhile: the answer is read from the inbox, where the form puts it
            if d["name"] == "payments":
                httpx.patch(f"{server.api_url}/deployments/{d['id']}", json={"paused": True},
                            timeout=30).raise_for_status()
        approve = next(d for d in deployments if d["name"] == "approve-scale")
        request = {"job": "payments", "proposal": k.pending.id, "current": 4, "proposed": 6, "min_scaleout": 1,
                   "max_scaleout": 12, "capacities": [100_000.0 * i for i in range(1, 13)],
                   "observed": [i == 4 for i in range(1, 13)], "recovery_times": [None, None, 900.0, 300.0, 200.0,
                                                                                   150.0, *[120.0] * 6],
                   "avg_workload": 380_000.0, "lag": 12_000.0, "forecast_peak": 530_000.0, "forecast_method": "arima",
                   "forecast_horizon_s": 1800.0, "predicted_recovery_s": 150.0,
                   "reasons": ["C_4 = 400,000/s is below the forecast peak 530,000/s"], "created": k.pending.created,
                   "expires": k.pending.expires}
        run = httpx.post(f"{server.api_url}/deployments/{approve['id']}/create_flow_run",
                         json={"parameters": {"request": request}}, timeout=30).json()
        server.start_worker(POOL, prefork=True)
        wait_for("the approval run to suspend", lambda: _run(server.api_url, run["id"])["state"]["type"] == "PAUSED",
                 240, server)
        with devtools.headless_chromium(tmp_path, WIDTH, HEIGHT) as ws_url:
            seen, still, given = asyncio.run(_answer_through_the_form(
                ws_url, f"{server.ui_url}/runs/flow-run/{run['id']}", tmp_path / "screenshots", server.api_url,
                run["id"]))
        text = " ".join(seen["text"].split())
        # What the operator reads: the proposal, the figures, why now and every scale-out's capacity.
        assert f"payments: scale out 4 → 6? Proposal {k.pending.id} expires at" in text
        assert "Capacity 400,000 tuples/s at 4, 600,000 at 6; workload 380,000, forecast peak 530,000 over the next " \
               "30 min (arima); recovery at 6: 2 min 30 s." in text
        assert "Why now: 1. C_4 = 400,000/s is below the forecast peak 530,000/s" in text
        assert "4: 400,000, observed, 5 min ← now" in text and "6: 600,000, 2 min 30 s ← proposed" in text
        assert "Capacity per scale-out (tuples/s, predicted recovery): 1: 100,000, never" in text
        assert "12: 1,200,000, 2 min" in text
        # Readable: no heading larger than the dialog's title, nothing scrolling inside the dialog's body.
        assert seen["heading"] is None or seen["heading"] <= seen["title"], seen
        assert seen["scrolling"] == [], seen["scrolling"]
        assert seen["operator"] == "", "the operator must not default to anybody"
        assert still == "PAUSED", "an answer without an operator must be refused: the run still waits"
        answered = wait_for("the answer in the job's inbox", lambda: Store(store).job("payments").pending(), 180,
                            server)
        ((_, msg),) = answered
        assert (msg.kind, msg.body["proposal"], msg.body["operator"], msg.body["reason"], msg.body["scaleout"]) == \
            ("approve", k.pending.id, "alice", "peak at noon", 6)
        assert given - 5 <= msg.body["wall"] <= given + 60  # when the form resumed the run, not when it got to it
        final = wait_for("the approval run to end", lambda: (r := _run(server.api_url, run["id"]))["state"]["type"]
                         in ("COMPLETED", "FAILED", "CRASHED") and r, 120, server)
        assert final["state"]["type"] == "COMPLETED", json.dumps(final["state"])
    finally:
        server.stop()
