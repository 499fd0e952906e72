"""Each job's control inbox in the knowledge store: `<url>/<job>/inbox/<ns>-<id>.json`.

Posting writes a whole file under a temporary name and renames it; the loop reads the waiting messages,
applies them, saves its knowledge and only then acknowledges (deletes) them, so a crash in between
re-applies them rather than losing them.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import asdict

import fsspec

from daedalus.connectors.store import DEFAULT_URL, check_job_name
from daedalus.models.loop.messages import ControlMessage


class Inbox:
    def __init__(self, url: str = DEFAULT_URL) -> None:
        self.fs, self.root = fsspec.core.url_to_fs(url.rstrip("/"))

    def _dir(self, job: str) -> str:
        return f"{self.root}/{check_job_name(job)}/inbox"

    def post(self, job: str, kind: str, body: dict | None = None, now: float | None = None) -> ControlMessage:
        msg = ControlMessage(id=f"{kind}-{uuid.uuid4().hex[:12]}", job=job, kind=kind,  # type: ignore[arg-type]
                             time=time.time() if now is None else now, body=body or {})
        d = self._dir(job)
        self.fs.makedirs(d, exist_ok=True)
        tmp = f"{d}/.tmp-{msg.id}"
        with self.fs.open(tmp, "w") as f:
            json.dump(asdict(msg), f)
        self.fs.mv(tmp, f"{d}/{time.time_ns():020d}-{msg.id}.json")
        return msg

    def pending(self, job: str) -> list[tuple[str, ControlMessage]]:
        """Waiting messages, oldest first, with the path to acknowledge each."""
        d = self._dir(job)
        if not self.fs.exists(d):
            return []
        out = []
        for path in sorted(p for p in self.fs.ls(d, detail=False) if p.endswith(".json")):
            with self.fs.open(path, "r") as f:
                out.append((path, ControlMessage(**json.load(f))))
        return out

    def ack(self, paths: list[str]) -> None:
        for path in paths:
            self.fs.rm(path)
