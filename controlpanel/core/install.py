"""The install id: read once per process (it changes only through `install_identity --renew`,
which asks for a restart of every process)."""

from __future__ import annotations

import threading

from django.db import transaction

from controlpanel.core.models import Installation, new_install_id

_lock = threading.Lock()
_cached: str | None = None


def install_id() -> str:
    """This install's id, made on first use where the migration did not make it."""
    global _cached
    with _lock:
        if _cached is None:
            _cached = installation().install_id
        return _cached


def installation() -> Installation:
    """The one row, made if missing (two processes racing make one)."""
    found, _ = Installation.objects.get_or_create(pk=Installation.ONLY)
    return found


def install_renew() -> tuple[str, str]:
    """Give this database a new install id; (old, new). For a copy of another install's
    database that runs as an install of its own: the objects the old id made are then
    another install's, never read, adopted or deleted by this one."""
    global _cached
    with transaction.atomic():
        row = Installation.objects.select_for_update().get(pk=installation().pk)
        old, row.install_id, row.renewed_from = row.install_id, new_install_id(), row.install_id
        row.save(update_fields=["install_id", "renewed_from"])
    with _lock:
        _cached = row.install_id
    return old, row.install_id


def forget() -> None:
    """Read the id again on next use (tests)."""
    global _cached
    with _lock:
        _cached = None
