"""Versioned knowledge store addressed by URL (a local folder by default; object storage through fsspec).

Layout: `<url>/<job>/<version:010d>.knowledge`, each file a header line with the SHA-256 of the payload
and its length, then the payload. Writes go to a temporary name and are renamed into place, so a reader
sees a whole version or none; a corrupt or truncated version is skipped with a warning and the previous
one is used.
"""

from __future__ import annotations

import hashlib
import logging
import re
import uuid
from dataclasses import dataclass, field

import fsspec

from daedalus.models.errors import ConfigurationError, KnowledgeError
from daedalus.models.knowledge import Knowledge

log = logging.getLogger(__name__)

DEFAULT_URL = ".daedalus/knowledge"
MAGIC = b"DAEDALUS-KNOWLEDGE"
SUFFIX = ".knowledge"
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


class KnowledgeStore:
    """Save and load per-job knowledge versions; keeps the newest `keep` versions."""

    def __init__(self, url: str = DEFAULT_URL, keep: int = 10) -> None:
        if keep < 2:
            raise ConfigurationError("the store must keep at least 2 versions to fall back on")
        self.url = url.rstrip("/")
        self.keep = keep
        self.fs, self.root = fsspec.core.url_to_fs(self.url)

    def _dir(self, job: str) -> str:
        return f"{self.root}/{check_job_name(job)}"

    def path(self, job: str, version: int) -> str:
        return f"{self._dir(job)}/{version:010d}{SUFFIX}"

    def versions(self, job: str) -> list[int]:
        """Stored versions of a job, oldest first."""
        d = self._dir(job)
        if not self.fs.exists(d):
            return []
        names = (p.rsplit("/", 1)[-1] for p in self.fs.ls(d, detail=False))
        return sorted(int(n[: -len(SUFFIX)]) for n in names if n.endswith(SUFFIX) and n[: -len(SUFFIX)].isdigit())

    def jobs(self) -> list[str]:
        if not self.fs.exists(self.root):
            return []
        return sorted(p.rsplit("/", 1)[-1] for p in self.fs.ls(self.root, detail=False) if self.fs.isdir(p))

    def save(self, knowledge: Knowledge) -> int:
        """Write a new version atomically and prune old ones; returns the version number."""
        existing = self.versions(knowledge.job)
        version = (existing[-1] + 1) if existing else 1
        d = self._dir(knowledge.job)
        self.fs.makedirs(d, exist_ok=True)
        tmp = f"{d}/.tmp-{uuid.uuid4().hex}"
        with self.fs.open(tmp, "wb") as f:
            f.write(encode(knowledge.to_bytes()))
        self.fs.mv(tmp, self.path(knowledge.job, version))
        for old in existing[: max(0, len(existing) + 1 - self.keep)]:
            self.fs.rm(self.path(knowledge.job, old))
        return version

    def read(self, job: str, version: int) -> Knowledge:
        with self.fs.open(self.path(job, version), "rb") as f:
            return Knowledge.from_bytes(decode(f.read()))

    def load(self, job: str) -> Loaded:
        """The newest readable version; corrupt ones are skipped with a warning each."""
        loaded = Loaded(None, None)
        for version in reversed(self.versions(job)):
            try:
                loaded.knowledge, loaded.version = self.read(job, version), version
                break
            except (KnowledgeError, OSError) as exc:
                msg = f"knowledge version {version} of {job!r} is unreadable ({exc}); falling back"
                log.warning(msg)
                loaded.warnings.append(msg)
        return loaded
