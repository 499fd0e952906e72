"""Small files next to a job's knowledge, owned by its loop: `status.json` (what the fleet overview and
`daedalus status` show) and `forecasts.json` (the last two hours of forecasts, for the forecast plot)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import fsspec

from daedalus.connectors.store import check_job_name

STATUS = "status.json"
FORECASTS = "forecasts.json"


def _path(store_url: str, job: str, name: str) -> tuple[Any, str]:
    fs, root = fsspec.core.url_to_fs(store_url.rstrip("/"))
    return fs, f"{root}/{check_job_name(job)}/{name}"


def write_json(store_url: str, job: str, name: str, data: Any) -> None:
    fs, path = _path(store_url, job, name)
    fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
    tmp = f"{path}.{uuid.uuid4().hex}.tmp"
    with fs.open(tmp, "w") as f:
        json.dump(data, f, separators=(",", ":"))
    fs.mv(tmp, path)


def read_json(store_url: str, job: str, name: str) -> Any:
    fs, path = _path(store_url, job, name)
    try:
        with fs.open(path, "r") as f:
            return json.load(f)
    except (FileNotFoundError, ValueError):
        return None


def read_status(store_url: str, job: str) -> dict[str, Any] | None:
    """The job's status as its last loop run wrote it, or None before its first run."""
    return read_json(store_url, job, STATUS)
