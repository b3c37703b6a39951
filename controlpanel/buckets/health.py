"""The `storage` readiness check: the default datastore answers and accepts its credentials."""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

from django.conf import settings

from controlpanel.buckets.selectors import datastore_config
from storage import objects
from storage.errors import AccessDenied, StorageError, StorageUnavailable

CONNECT_TIMEOUT_S = 2.0


def check_storage() -> str | None:
    """None when the default datastore is reachable (or none is configured), else why not."""
    if not settings.S3_ENDPOINT_URL:
        return None  # no default datastore: readiness does not depend on one
    parts = urlsplit(settings.S3_ENDPOINT_URL)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        # A quick TCP probe first: boto3's retries would keep /readyz waiting a minute.
        socket.create_connection((parts.hostname, port), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        return f"storage unreachable: {type(exc).__name__}"
    try:
        objects.list_buckets(datastore_config(settings.S3_ALIAS))
    except AccessDenied:
        return "storage refused the credentials"
    except StorageUnavailable:
        return "storage unreachable"
    except StorageError as error:
        return f"storage error: {error.code or 'unknown'}"
    return None
