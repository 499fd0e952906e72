"""Headless Chromium driven over the DevTools protocol: the browser of the UI tests (no driver to install)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.request
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from itertools import count
from pathlib import Path
from typing import Any

import pytest

from daedalus.runtime.ports import free_port


@contextmanager
def headless_chromium(folder: Path, width: int, height: int) -> Iterator[str]:
    """Chromium with a profile of its own in `folder`; yields the DevTools WebSocket URL of its page and always stops
    it. Without Chromium the test is skipped, naming the package that brings it."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("headless Chromium is not installed: Debian package `chromium` (scripts/system-deps.sh)")
    port = free_port()
    browser = subprocess.Popen(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
         f"--user-data-dir={folder / 'chromium'}", f"--remote-debugging-port={port}", "--remote-allow-origins=*",
         f"--window-size={width},{height}", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "HOME": str(folder)})
    try:
        targets: list[dict[str, Any]] = []
        deadline = time.monotonic() + 30
        while not targets and time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=2) as r:
                    targets = json.load(r)
            except OSError:
                time.sleep(0.2)
        yield next(t["webSocketDebuggerUrl"] for t in targets if t["type"] == "page")
    finally:
        browser.terminate()
        browser.wait(20)


class Page:
    """One page's DevTools session: protocol calls and JavaScript evaluated in the page."""

    def __init__(self, ws: Any) -> None:
        self._ws, self._ids = ws, count(1)

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        mid = next(self._ids)
        await self._ws.send(json.dumps({"id": mid, "method": method, "params": params}))
        while True:  # events arrive between the answers: skip them
            msg = json.loads(await self._ws.recv())
            if msg.get("id") == mid:
                return msg.get("result", {})

    async def js(self, expression: str) -> Any:
        result = await self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return result.get("result", {}).get("value")


@asynccontextmanager
async def page(ws_url: str) -> AsyncIterator[Page]:
    import websockets

    async with websockets.connect(ws_url, max_size=None) as ws:
        yield Page(ws)
