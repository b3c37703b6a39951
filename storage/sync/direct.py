"""Plain signed S3 requests for the sync engine's many small calls, without botocore's
per-call machinery.

A botocore `get_object` costs about 1.1 ms of CPU (events, models, parsing, retries); for a
volume of small files that, not the network, is the pull's bottleneck on a small machine. This
module signs a request itself (AWS Signature Version 4, the same headers botocore signs),
sends it on a keep-alive connection of the calling thread (storage/sync/wire.py, which reads
the answer's headers without `http.client`'s email parser), and streams the answer. It covers
the happy path only: the listing of a volume (ListObjectsV2), the GET of one object and the
PUT of a small one. Anything else (a status other than 200, a broken connection, an
unexpected answer) raises `DirectError`, and the caller redoes that one call through boto3
(storage/client.py), whose retries, redirects and error messages then apply. A store that
cannot be reached this way at all (a proxy is configured for it, or a connection cannot be
made) is not tried again by that `Direct`.

Integrity is the caller's: a GET's bytes are checked against the listed ETag, a PUT's ETag
against the MD5 of what was sent (and a store that checks Content-MD5 refuses other bytes).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import threading
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING
from urllib.parse import quote, unquote, urlsplit

from storage.client import CONNECT_TIMEOUT_S, READ_TIMEOUT_S
from storage.datastore import DatastoreConfig
from storage.objects import ObjectInfo
from storage.sync.wire import Connection, ProtocolError, Response, Unreachable

if TYPE_CHECKING:  # ssl loads only for an https store
    import ssl

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
_S3 = "{http://s3.amazonaws.com/doc/2006-03-01/}"
READ_BLOCK = 1024 * 1024


class DirectError(Exception):
    """The plain request did not give the expected answer: redo it through boto3."""


class Direct:
    """Signed requests to one datastore, one keep-alive connection per thread."""

    def __init__(self, config: DatastoreConfig) -> None:
        url = urlsplit(config.endpoint_url)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"unsupported endpoint {config.endpoint_url!r}")
        self._config = config
        self._https = url.scheme == "https"
        self._host = url.netloc.rpartition("@")[2]  # what the Host header says and is signed
        self._hostname = url.hostname
        self._port = url.port
        self._base = url.path.rstrip("/")
        self._region = config.region or "us-east-1"
        self._local = threading.local()
        self._connections: list[Connection] = []
        self._lock = threading.Lock()
        self._keys: dict[str, bytes] = {}
        self._context: ssl.SSLContext | None = None
        # Requests through a proxy are botocore's business (it reads the same variables).
        self.usable = not _proxied(url.scheme, self._hostname)

    # ---- requests ----------------------------------------------------------------------

    def list_objects(self, bucket: str, prefix: str) -> list[ObjectInfo]:
        """Every object under `prefix` (ListObjectsV2, 1,000 a page), in key order."""
        objects: list[ObjectInfo] = []
        token = ""
        while True:
            query = {"list-type": "2", "prefix": prefix, "encoding-type": "url"}
            if token:
                query["continuation-token"] = token
            status, body = self._request("GET", f"/{bucket}", query)
            if status != 200:
                raise DirectError(f"listing answered {status}")
            try:
                page, token = _parse_listing(body)
            except (ElementTree.ParseError, KeyError, ValueError, TypeError) as error:
                raise DirectError(f"unexpected listing: {error}") from None
            objects.extend(page)
            if not token:
                return objects

    def get_object(self, bucket: str, key: str, write: Callable[[bytes], object]) -> int:
        """Stream one object to `write`, block by block; the number of bytes. DirectError
        before the first block is written when the answer is not 200; a failure after that
        raises DirectError too (the caller starts the file again)."""
        connection, response = self._send("GET", f"/{bucket}/{key}", {}, b"", {})
        try:
            if response.status != 200:
                response.read()
                raise DirectError(f"GET answered {response.status}")
            size = 0
            for block in response.stream(READ_BLOCK):  # ProtocolError if cut short
                write(block)
                size += len(block)
            return size
        except (OSError, ProtocolError) as error:
            connection.close()
            raise DirectError(f"GET failed: {error}") from None

    def put_object(self, bucket: str, key: str, data: bytes, md5: bytes) -> str:
        """Store `data`, its MD5 digest in Content-MD5; the object's ETag (the caller compares
        it with that MD5)."""
        headers = {"Content-MD5": base64.b64encode(md5).decode(), "Content-Length": str(len(data))}
        payload = hashlib.sha256(data).hexdigest()
        connection, response = self._send("PUT", f"/{bucket}/{key}", {}, data, headers, payload)
        try:
            response.read()
        except (OSError, ProtocolError) as error:
            connection.close()
            raise DirectError(f"PUT failed: {error}") from None
        if response.status != 200:
            raise DirectError(f"PUT answered {response.status}")
        return response.headers.get("etag", "").strip('"')

    def close(self) -> None:
        with self._lock:
            connections, self._connections = self._connections, []
        for connection in connections:
            connection.close()

    # ---- plumbing ----------------------------------------------------------------------

    def _request(self, method: str, path: str, query: dict[str, str]) -> tuple[int, bytes]:
        connection, response = self._send(method, path, query, b"", {})
        try:
            return response.status, response.read()
        except (OSError, ProtocolError) as error:
            connection.close()
            raise DirectError(f"{method} failed: {error}") from None

    def _send(
        self,
        method: str,
        path: str,
        query: dict[str, str],
        body: bytes,
        headers: dict[str, str],
        payload_hash: str = EMPTY_SHA256,
    ) -> tuple[Connection, Response]:
        """Send a signed request; the connection and the answer, its body not read yet."""
        if not self.usable:
            raise DirectError("plain requests are off for this store")
        uri = quote(self._base + path, safe="/~")
        query_string = "&".join(
            f"{quote(name, safe='~')}={quote(value, safe='~')}"
            for name, value in sorted(query.items())
        )
        signed = self._sign(method, uri, query_string, payload_hash, headers)
        signed["Accept-Encoding"] = "identity"  # as http.client sent it: no compressed bodies
        target = f"{uri}?{query_string}" if query_string else uri
        connection = self._connection()
        try:
            return connection, connection.request(method, target, signed, body)
        except (OSError, ProtocolError) as error:
            connection.close()
            if isinstance(error, Unreachable):
                self.usable = False  # not reachable this way: boto3 from now on
            raise DirectError(f"{method} could not be sent: {error}") from None

    def _sign(
        self, method: str, uri: str, query: str, payload: str, extra: dict[str, str]
    ) -> dict[str, str]:
        now = datetime.now(UTC)
        stamp = now.strftime("%Y%m%dT%H%M%SZ")
        day = stamp[:8]
        headers = {"host": self._host, "x-amz-content-sha256": payload, "x-amz-date": stamp}
        if self._config.session_token:
            headers["x-amz-security-token"] = self._config.session_token
        for name, value in extra.items():
            headers[name.lower()] = value.strip()
        names = sorted(headers)
        canonical = "\n".join(
            [
                method,
                uri,
                query,
                "".join(f"{name}:{headers[name]}\n" for name in names),
                ";".join(names),
                payload,
            ]
        )
        scope = f"{day}/{self._region}/s3/aws4_request"
        to_sign = "\n".join(
            ["AWS4-HMAC-SHA256", stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()]
        )
        signature = hmac.new(self._key(day), to_sign.encode(), hashlib.sha256).hexdigest()
        headers["Authorization"] = (
            f"AWS4-HMAC-SHA256 Credential={self._config.access_key}/{scope}, "
            f"SignedHeaders={';'.join(names)}, Signature={signature}"
        )
        headers["Host"] = headers.pop("host")
        return headers

    def _key(self, day: str) -> bytes:
        key = self._keys.get(day)
        if key is None:
            key = ("AWS4" + self._config.secret_key).encode()
            for part in (day, self._region, "s3", "aws4_request"):
                key = hmac.new(key, part.encode(), hashlib.sha256).digest()
            self._keys = {day: key}
        return key

    def _connection(self) -> Connection:
        connection: Connection | None = getattr(self._local, "connection", None)
        if connection is None:
            connection = Connection(
                self._hostname,
                self._port or (443 if self._https else 80),
                tls=self._tls if self._https else None,
                connect_timeout=CONNECT_TIMEOUT_S,
                read_timeout=READ_TIMEOUT_S,
            )
            self._local.connection = connection
            with self._lock:
                self._connections.append(connection)
        return connection

    def _tls(self) -> ssl.SSLContext:
        if self._context is None:
            # The CA bundle botocore would use: AWS_CA_BUNDLE, else the bundled certifi one.
            import ssl

            from botocore.httpsession import get_cert_path

            bundle = os.environ.get("AWS_CA_BUNDLE") or get_cert_path(True)
            self._context = ssl.create_default_context(cafile=bundle)
        return self._context


def _proxied(scheme: str, hostname: str) -> bool:
    # urllib.request reads the proxies from *_proxy variables only (on Linux); without one,
    # its import (http.client, the email package: ~40 ms of every command) is not needed.
    if not any(name.lower().endswith("_proxy") and value for name, value in os.environ.items()):
        return False
    import urllib.request

    proxies = urllib.request.getproxies()
    return bool(proxies.get(scheme)) and not urllib.request.proxy_bypass(hostname)


def _parse_listing(body: bytes) -> tuple[list[ObjectInfo], str]:
    # What botocore does with the same answer: ElementTree never fetches external entities,
    # and expat >= 2.4 (Python 3.11's) caps entity expansion.
    root = ElementTree.fromstring(body)  # noqa: S314
    if root.tag != f"{_S3}ListBucketResult":
        raise ValueError(f"root element {root.tag}")
    encoded = root.findtext(f"{_S3}EncodingType") == "url"
    objects = []
    for entry in root.iterfind(f"{_S3}Contents"):
        key = entry.findtext(f"{_S3}Key")
        size = entry.findtext(f"{_S3}Size")
        modified = entry.findtext(f"{_S3}LastModified")
        if key is None or size is None or modified is None:
            raise ValueError("an entry without Key, Size or LastModified")
        objects.append(
            ObjectInfo(
                key=unquote(key) if encoded else key,
                size=int(size),
                last_modified=_timestamp(modified),
                etag=(entry.findtext(f"{_S3}ETag") or "").strip('"'),
            )
        )
    truncated = root.findtext(f"{_S3}IsTruncated") == "true"
    token = root.findtext(f"{_S3}NextContinuationToken") or "" if truncated else ""
    if truncated and not token:
        raise ValueError("a truncated listing without a continuation token")
    return objects, token


def _timestamp(text: str) -> datetime:
    value = datetime.fromisoformat(text.strip())
    return value if value.tzinfo else value.replace(tzinfo=UTC)
