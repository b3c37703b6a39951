"""The one factory for boto3 S3 clients: one client per datastore, shared by every thread.

boto3 clients are thread-safe once built, but building one is slow (~50 ms) and boto3's default
session is not thread-safe, so clients are built from their own session, once per config.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import TYPE_CHECKING

from storage.datastore import DatastoreConfig

if TYPE_CHECKING:
    import botocore.config
    from botocore.client import BaseClient

# boto3 is imported when the first client is built: it takes ~0.2 s, which a short
# `python -m storage.sync pull` of small files (plain requests, storage/sync/direct.py) skips.

# Enough for the sync engine's workers, each running a multipart transfer with a few threads.
MAX_POOL_CONNECTIONS = 64
CONNECT_TIMEOUT_S = 10
READ_TIMEOUT_S = 120
MAX_ATTEMPTS = 5
# Health checks answer within a probe's timeout: one attempt, short timeouts.
PROBE_TIMEOUT_S = 2

_clients: dict[DatastoreConfig, BaseClient] = {}
_probe_clients: dict[DatastoreConfig, BaseClient] = {}
_sts_clients: dict[tuple[DatastoreConfig, str | None], BaseClient] = {}
_lock = threading.Lock()


def client_settings() -> botocore.config.Config:
    """The botocore settings every Ajuste client uses."""
    import botocore.config

    return botocore.config.Config(
        signature_version="s3v4",
        # Path style: self-hosted endpoints (s3rver, MinIO, Ceph) rarely have wildcard DNS.
        s3={"addressing_style": "path"},
        retries={"max_attempts": MAX_ATTEMPTS, "mode": "standard"},
        max_pool_connections=MAX_POOL_CONNECTIONS,
        connect_timeout=CONNECT_TIMEOUT_S,
        read_timeout=READ_TIMEOUT_S,
        # botocore >= 1.36 adds CRC32 trailers to every upload by default; s3rver, older MinIO
        # and Ceph reject or mangle them. Only send/check checksums when an operation needs one.
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
    )


def make_s3_client(config: DatastoreConfig, *, public: bool = False) -> BaseClient:
    """The shared S3 client for `config` (built on first use, then cached). With `public`, the
    client for its public endpoint: a presigned URL is valid only for the host it was signed
    for, so URLs handed to browsers are signed by this one (it never sends a request)."""
    if public and config.presign_endpoint_url != config.endpoint_url:
        config = replace(config, endpoint_url=config.presign_endpoint_url, public_endpoint_url="")
    with _lock:
        client = _clients.get(config)
        if client is None:
            client = _build_client(config)
            _clients[config] = client
        return client


def make_probe_client(config: DatastoreConfig) -> BaseClient:
    """A client for health checks: 2 s timeouts and a single attempt, so a store that is down
    is reported within seconds instead of after 5 attempts of up to 120 s."""
    with _lock:
        client = _probe_clients.get(config)
        if client is None:
            import botocore.config

            quick = botocore.config.Config(
                retries={"total_max_attempts": 1, "mode": "standard"},
                connect_timeout=PROBE_TIMEOUT_S,
                read_timeout=PROBE_TIMEOUT_S,
            )
            client = _build_client(config, client_settings().merge(quick))
            _probe_clients[config] = client
        return client


def make_sts_client(config: DatastoreConfig, *, endpoint_url: str | None) -> BaseClient:
    """The STS client that assumes roles with `config`'s keys (storage.credentials); None for
    `endpoint_url` is boto3's regional AWS endpoint."""
    key = (config, endpoint_url)
    with _lock:
        client = _sts_clients.get(key)
        if client is None:
            import boto3.session
            import botocore.config

            session = boto3.session.Session()
            client = session.client(
                "sts",
                endpoint_url=endpoint_url,
                region_name=config.region or "us-east-1",
                aws_access_key_id=config.access_key,
                aws_secret_access_key=config.secret_key,
                aws_session_token=config.session_token or None,
                config=botocore.config.Config(
                    retries={"max_attempts": MAX_ATTEMPTS, "mode": "standard"},
                    connect_timeout=CONNECT_TIMEOUT_S,
                    read_timeout=CONNECT_TIMEOUT_S * 3,
                ),
            )
            _sts_clients[key] = client
        return client


def clear_client_cache() -> None:
    """Forget every cached client (after credentials rotate, or between tests)."""
    with _lock:
        _clients.clear()
        _probe_clients.clear()
        _sts_clients.clear()


def _build_client(
    config: DatastoreConfig, settings: botocore.config.Config | None = None
) -> BaseClient:
    import boto3.session

    session = boto3.session.Session()
    return session.client(
        "s3",
        endpoint_url=config.endpoint_url,
        region_name=config.region or "us-east-1",
        aws_access_key_id=config.access_key,
        aws_secret_access_key=config.secret_key,
        aws_session_token=config.session_token or None,
        config=settings or client_settings(),
    )
