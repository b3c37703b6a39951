"""The `storage` readiness check: the default datastore answers and accepts its credentials."""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

from django.conf import settings

from controlpanel.buckets.selectors import datastore_config
from storage.client import make_probe_client
from storage.errors import AccessDenied, StorageError, StorageUnavailable, s3_errors

CONNECT_TIMEOUT_S = 1.0


def check_storage() -> str | None:
    """None when the default datastore is reachable (or none is configured), else why not."""
    if not settings.S3_ENDPOINT_URL:
        return None  # no default datastore: readiness does not depend on one
    parts = urlsplit(settings.S3_ENDPOINT_URL)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        # A quick TCP probe, then one request with 2 s timeouts and no retries (the shared
        # client's 5 attempts of up to 120 s would hold /readyz for minutes).
        socket.create_connection((parts.hostname, port), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        return f"storage unreachable: {type(exc).__name__}"
    try:
        with s3_errors():
            make_probe_client(datastore_config(settings.S3_ALIAS)).list_buckets()
    except AccessDenied:
        return "storage refused the credentials"
    except StorageUnavailable:
        return "storage unreachable"
    except StorageError as error:
        return f"storage error: {error.code or 'unknown'}"
    return None
