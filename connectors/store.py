"""The job store, addressed by URL (a local folder by default; object storage through fsspec): the one owner of
every file a run keeps, with one filesystem and one atomic write.

Layout: `<url>/<job>/<version:010d>.knowledge` (each file a header line with the SHA-256 of the payload and its
length, then the payload), `<url>/<job>/inbox/<ns>-<id>.json` (the control inbox), `<url>/<job>/status.json` and
`<url>/<job>/forecasts.json` (what the dashboards show), and `<url>/PAUSED-ALL.json`, the kill switch for all
jobs (a file at the root: job folders are the only directories there). Every write goes to a temporary name and
is renamed into place, so a reader sees a whole file or none; a corrupt or truncated knowledge version is
skipped with a warning and the previous one is used.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any

import fsspec

from daedalus.models.errors import ConfigurationError, KnowledgeError
from daedalus.models.knowledge import Knowledge
from daedalus.models.loop.messages import ControlMessage

log = logging.getLogger(__name__)

DEFAULT_URL = ".daedalus/knowledge"
MAGIC = b"DAEDALUS-KNOWLEDGE"
SUFFIX = ".knowledge"
INBOX = "inbox"
STATUS = "status.json"
FORECASTS = "forecasts.json"
KILL_SWITCH = "PAUSED-ALL.json"
JOB_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def check_job_name(job: str) -> str:
    if not JOB_NAME.match(job):
        raise ConfigurationError(
            f"job name {job!r} is not allowed: use letters, digits, '.', '_' or '-' (at most 128 characters)"
        )
    return job


def encode(payload: bytes) -> bytes:
    digest = hashlib.sha256(payload).hexdigest()
    return MAGIC + f" sha256={digest} bytes={len(payload)}\n".encode() + payload


def decode(blob: bytes) -> bytes:
    header, sep, payload = blob.partition(b"\n")
    if not sep or not header.startswith(MAGIC):
        raise KnowledgeError("not a knowledge file (header missing)")
    try:  # a garbled header is a corrupt version like any other: the store falls back on the previous one
        fields = dict(p.split("=", 1) for p in header[len(MAGIC):].decode().split())
        size, digest = int(fields["bytes"]), fields["sha256"]
    except (ValueError, KeyError) as exc:  # no `=`, bytes=zz, not UTF-8 (a ValueError), a field missing
        raise KnowledgeError(f"malformed header {header[:120]!r}") from exc
    if size != len(payload):
        raise KnowledgeError(f"truncated: {len(payload)} of {size} bytes")
    if hashlib.sha256(payload).hexdigest() != digest:
        raise KnowledgeError("checksum mismatch")
    return payload


@dataclass
class Loaded:
    knowledge: Knowledge | None
    version: int | None
    warnings: list[str] = field(default_factory=list)


class Store:
    """The store's root: one filesystem, the one atomic write every writer uses, the job listing, the kill switch."""

    def __init__(self, url: str = DEFAULT_URL, keep: int = 10) -> None:
        if keep < 2:
            raise ConfigurationError("the store must keep at least 2 versions to fall back on")
        self.url = url.rstrip("/")
        self.keep = keep
        self.fs, self.root = fsspec.core.url_to_fs(self.url)

    def job(self, name: str) -> JobStore:
        """One job's folder; the name is checked here, so no path leaves the store."""
        return JobStore(self, check_job_name(name))

    def exists(self) -> bool:
        return bool(self.fs.exists(self.root))

    def jobs(self) -> list[str]:
        if not self.exists():
            return []
        return sorted(p.rsplit("/", 1)[-1] for p in self.fs.ls(self.root, detail=False) if self.fs.isdir(p))

    def write_atomic(self, path: str, data: bytes, durable: bool = False) -> None:
        """Write `path` (under the root) whole or not at all: to a temporary name in its folder, then renamed into
        place, so a reader never sees half a file. `durable` also syncs it to disk first (a local store only)."""
        folder, name = f"{self.root}/{path}".rsplit("/", 1)
        self.fs.makedirs(folder, exist_ok=True)
        tmp = f"{folder}/.tmp-{uuid.uuid4().hex}"
        with self.fs.open(tmp, "wb") as f:
            f.write(data)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        self.fs.mv(tmp, f"{folder}/{name}")

    def kill_switch(self) -> dict[str, Any] | None:
        """The kill switch for all jobs, if it is on: who set it, when and why."""
        try:
            with self.fs.open(f"{self.root}/{KILL_SWITCH}", "r") as f:
                return json.load(f)
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            return {"operator": "?", "reason": "unreadable kill-switch file: treated as on", "time": None}

    def set_kill_switch(self, operator: str, reason: str) -> None:
        self.write_atomic(KILL_SWITCH, json.dumps({"operator": operator, "reason": reason,
                                                   "time": time.time()}).encode())

    def clear_kill_switch(self) -> bool:
        """Turn the kill switch off; False if it was not on."""
        path = f"{self.root}/{KILL_SWITCH}"
        if not self.fs.exists(path):
            return False
        self.fs.rm(path)
        return True


class JobStore:
    """Everything a run keeps in its job's folder: knowledge versions, the control inbox, status and forecasts."""

    def __init__(self, store: Store, name: str) -> None:
        self.store = store
        self.name = name
        self.dir = f"{store.root}/{name}"

    def write(self, name: str, data: bytes, durable: bool = False) -> None:
        """A file of the job's folder, through the store's one atomic write."""
        self.store.write_atomic(f"{self.name}/{name}", data, durable)

    # --- knowledge -----------------------------------------------------------------------------

    def path(self, version: int) -> str:
        return f"{self.dir}/{version:010d}{SUFFIX}"

    def versions(self) -> list[int]:
        """Stored versions of the job, oldest first."""
        fs = self.store.fs
        if not fs.exists(self.dir):
            return []
        names = (p.rsplit("/", 1)[-1] for p in fs.ls(self.dir, detail=False))
        return sorted(int(n[: -len(SUFFIX)]) for n in names if n.endswith(SUFFIX) and n[: -len(SUFFIX)].isdigit())

    def save(self, knowledge: Knowledge) -> int:
        """Write a new version atomically and prune old ones; returns the version number."""
        if knowledge.job != self.name:
            raise KnowledgeError(f"knowledge of job {knowledge.job!r} cannot be saved as {self.name!r}'s")
        existing = self.versions()
        version = (existing[-1] + 1) if existing else 1
        self.write(f"{version:010d}{SUFFIX}", encode(knowledge.to_bytes()))
        for old in existing[: max(0, len(existing) + 1 - self.store.keep)]:
            self.store.fs.rm(self.path(old))
        return version

    def payload(self, version: int) -> bytes:
        """A version's checked payload (KnowledgeError when it is corrupt)."""
        with self.store.fs.open(self.path(version), "rb") as f:
            return decode(f.read())

    def read(self, version: int) -> Knowledge:
        return Knowledge.from_bytes(self.payload(version))

    def load(self) -> Loaded:
        """The newest readable version; corrupt ones are skipped with a warning each."""
        loaded = Loaded(None, None)
        for version in reversed(self.versions()):
            try:
                loaded.knowledge, loaded.version = self.read(version), version
                break
            except (KnowledgeError, OSError) as exc:
                msg = f"knowledge version {version} of {self.name!r} is unreadable ({exc}); falling back"
                log.warning(msg)
                loaded.warnings.append(msg)
        return loaded

    # --- the control inbox: <job>/inbox/<ns>-<id>.json -------------------------------------------
    # Posting writes a whole file; the loop reads the waiting messages, applies them, saves its knowledge and only
    # then acknowledges (deletes) them, so a crash in between re-applies them rather than losing them.

    def post(self, kind: str, body: dict | None = None, now: float | None = None) -> ControlMessage:
        msg = ControlMessage(id=f"{kind}-{uuid.uuid4().hex[:12]}", job=self.name, kind=kind,  # type: ignore[arg-type]
                             time=time.time() if now is None else now, body=body or {})
        self.write(f"{INBOX}/{time.time_ns():020d}-{msg.id}.json", json.dumps(asdict(msg)).encode())
        return msg

    def pending(self) -> list[tuple[str, ControlMessage]]:
        """Waiting messages, oldest first, with the path to acknowledge each."""
        fs, d = self.store.fs, f"{self.dir}/{INBOX}"
        if not fs.exists(d):
            return []
        out = []
        for path in sorted(p for p in fs.ls(d, detail=False) if p.endswith(".json")):
            with fs.open(path, "r") as f:
                out.append((path, ControlMessage(**json.load(f))))
        return out

    def ack(self, paths: list[str]) -> None:
        for path in paths:
            self.store.fs.rm(path)

    # --- small JSON files owned by the loop: status.json, forecasts.json ----------------------------

    def write_json(self, name: str, data: Any) -> None:
        self.write(name, json.dumps(data, separators=(",", ":")).encode())

    def read_json(self, name: str, strict: bool = False) -> Any:
        """The file's data; None when it is missing or unreadable, unless `strict`: then both raise (the exporter
        must tell "not run yet" from "unreadable")."""
        try:
            with self.store.fs.open(f"{self.dir}/{name}", "r") as f:
                return json.load(f)
        except (FileNotFoundError, ValueError):
            if strict:
                raise
            return None

    def status(self) -> dict[str, Any] | None:
        """The job's status as its last loop run wrote it (what the fleet overview and `daedalus status` show),
        or None before its first run."""
        return self.read_json(STATUS)
