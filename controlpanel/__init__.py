"""Ajuste's control panel: the only Django code; it calls storage/, deploy/ and training/."""

from controlpanel.celery import app as celery_app

__all__ = ["celery_app"]
