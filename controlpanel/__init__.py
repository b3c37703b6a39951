"""Ajuste's control panel: the only Django code; it calls storage/, deploy/ and training/.

The Celery app is loaded by the core app's ready() in every Django process, not imported here:
`controlpanel.cli` (the `ajuste` command) lives in this package and must not import Django.
"""

from __future__ import annotations

from typing import Any

__all__ = ["celery_app"]


def __getattr__(name: str) -> Any:
    if name == "celery_app":
        from controlpanel.celery import app

        return app
    raise AttributeError(f"module 'controlpanel' has no attribute {name!r}")
