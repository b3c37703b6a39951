"""Uploads and downloads through presigned URLs: the panel signs, the bytes go straight
between this machine and the datastore. Files stream in 1 MiB chunks, big ones as parallel
16 MiB parts, so memory stays flat whatever the size."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from pathlib import Path
from types import TracebackType
from typing import Any

import click
import httpx

from controlpanel.cli.client import Api, ApiError

CHUNK = 1024 * 1024
SINGLE_PUT_MAX = 16 * CHUNK
PART_SIZE = 16 * CHUNK  # the server raises it for huge files (10,000 parts at most)
PART_WORKERS = 4
PRESIGN_BATCH = 100
ATTEMPTS = 3
S3_TIMEOUT = httpx.Timeout(300.0, connect=10.0)


class Progress:
    """A byte counter drawn as a bar on stderr when stdout is a terminal (thread-safe)."""

    def __init__(self, total: int, label: str, *, enabled: bool | None = None) -> None:
        show = sys.stdout.isatty() if enabled is None else enabled
        self._bar: Any = (
            click.progressbar(
                length=max(total, 1),
                label=label,
                file=sys.stderr,
                show_pos=False,
                show_percent=True,
            )
            if show
            else None
        )
        self._lock = threading.Lock()
        self.done = 0

    def __enter__(self) -> Progress:
        if self._bar is not None:
            self._bar.__enter__()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._bar is not None:
            self._bar.__exit__(kind, exc, tb)

    def advance(self, count: int) -> None:
        with self._lock:
            self.done += count
            if self._bar is not None:
                self._bar.update(count)


def bucket_path(datastore: str, name: str) -> str:
    return f"buckets/{datastore}/{name}/"


def _s3_client() -> httpx.Client:
    # Its own client: the API token must never travel to the datastore.
    return httpx.Client(timeout=S3_TIMEOUT)


def _chunks(
    path: Path, offset: int, length: int, progress: Progress, sent: list[int]
) -> Iterator[bytes]:
    with path.open("rb") as handle:
        handle.seek(offset)
        remaining = length
        while remaining:
            data = handle.read(min(CHUNK, remaining))
            if not data:
                raise click.ClickException(f"{path} changed while it was being uploaded")
            remaining -= len(data)
            sent[0] += len(data)
            progress.advance(len(data))
            yield data


def _put(
    s3: httpx.Client, url: str, path: Path, offset: int, length: int, progress: Progress
) -> str:
    """PUT `length` bytes of `path` from `offset` (retried); return the ETag."""
    for attempt in range(1, ATTEMPTS + 1):
        sent = [0]
        try:
            # An explicit Content-Length: presigned PUTs refuse chunked transfer encoding.
            response = s3.put(
                url,
                content=_chunks(path, offset, length, progress, sent),
                headers={"Content-Length": str(length)},
            )
            if response.status_code < 300:
                return response.headers.get("ETag", "").strip('"')
            error: str = f"the datastore answered {response.status_code}"
            retry = response.status_code >= 500
        except httpx.TransportError as exc:
            error, retry = f"transfer failed: {exc}", True
        progress.advance(-sent[0])
        if not retry or attempt == ATTEMPTS:
            raise ApiError(0, f"uploading {path}: {error}")
    raise AssertionError("unreachable")


def upload_file(api: Api, bucket: str, path: Path, key: str, progress: Progress) -> dict:
    """Upload one file to `key`; return {key, size, etag}."""
    size = path.stat().st_size
    with _s3_client() as s3:
        if size <= SINGLE_PUT_MAX:
            url = api.post(bucket + "upload-url/", {"key": key})["url"]
            etag = _put(s3, url, path, 0, size, progress)
            api.post(bucket + "upload-done/", {"key": key})
            return {"key": key, "size": size, "etag": etag}
        plan = api.post(bucket + "uploads/", {"key": key, "size": size, "part_size": PART_SIZE})
        upload = {"key": key, "upload_id": plan["upload_id"]}
        try:
            parts = _upload_parts(api, s3, bucket, path, plan, progress)
            done = api.post(bucket + "uploads/complete/", {**upload, "parts": parts})
        except BaseException:
            with suppress(click.ClickException):
                api.post(bucket + "uploads/abort/", upload)
            raise
    return {"key": key, "size": size, "etag": done["etag"]}


def _upload_parts(
    api: Api, s3: httpx.Client, bucket: str, path: Path, plan: dict, progress: Progress
) -> list[dict]:
    size, part_size, count = path.stat().st_size, plan["part_size"], plan["part_count"]
    parts: list[dict] = []
    with ThreadPoolExecutor(PART_WORKERS) as pool:
        for first in range(1, count + 1, PRESIGN_BATCH):
            numbers = list(range(first, min(count, first + PRESIGN_BATCH - 1) + 1))
            body = {"key": plan["key"], "upload_id": plan["upload_id"], "part_numbers": numbers}
            urls = api.post(bucket + "uploads/parts/", body)["parts"]

            def send(part: dict) -> dict:
                offset = (part["part_number"] - 1) * part_size
                length = min(part_size, size - offset)
                etag = _put(s3, part["url"], path, offset, length, progress)
                return {"part_number": part["part_number"], "etag": etag}

            parts.extend(pool.map(send, urls))
    return parts


def download_object(api: Api, bucket: str, key: str, dest: Path, progress: Progress) -> dict:
    """Download `key` into the file `dest` (through a temporary name); return {key, size}."""
    url = api.get(bucket + "download-url/", key=key)["url"]
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_name(dest.name + ".ajuste-part")
    size = 0
    with _s3_client() as s3, s3.stream("GET", url) as response:
        if response.status_code >= 300:
            raise ApiError(response.status_code, f"the datastore refused to send {key}")
        with partial.open("wb") as handle:
            for chunk in response.iter_bytes(CHUNK):
                handle.write(chunk)
                size += len(chunk)
                progress.advance(len(chunk))
    partial.replace(dest)
    return {"key": key, "size": size, "path": str(dest)}


_UNSAFE = ("\\", "\0", ":")


def local_path(root: Path, relative_key: str) -> Path | None:
    """Where a key lands under `root`, or None if it could escape it or name no plain path
    (`..`, `.`, `/x`, `a//b`, a backslash, NUL, or a ':': on Windows `C:x` is relative to the
    drive's current folder and `x:y` opens a stream of `x`)."""
    parts = relative_key.split("/")
    if any(part in ("", ".", "..") or any(c in part for c in _UNSAFE) for part in parts):
        return None
    return root.joinpath(*parts)


def folder_prefix(key: str) -> str:
    """The listing prefix of the folder `key`: `runs/1` -> `runs/1/`, so it never takes in
    `runs/10/...` or `runs/1-old.txt` (a trailing '/' is kept, never doubled or stripped:
    `a//` is its own folder)."""
    return key if key.endswith("/") else key + "/"


def list_all(api: Api, bucket: str, prefix: str) -> list[dict]:
    """Every object under `prefix` (flat listing, page after page)."""
    found: list[dict] = []
    token = None
    while True:
        page = api.get(bucket + "objects/", prefix=prefix, delimiter="", token=token)
        found.extend(page["objects"])
        token = page.get("next_token")
        if not token:
            return found
