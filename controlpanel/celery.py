"""The Celery app: Redis broker, JSON only, late acks (settings under CELERY_*)."""

import os
from typing import Any

from celery import Celery
from celery.signals import beat_init, worker_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlpanel.settings")

# Signal receivers, connected before the worker sets up its logging: the request id travels in
# task headers and onto the worker's log lines; task runs are measured for /metrics.
import controlpanel.core.metrics.celery_signals
import controlpanel.core.requestid  # noqa: F401

app = Celery("ajuste")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_init.connect
@beat_init.connect
def _refuse_untrusted_local_backend(**kwargs: Any) -> None:
    """Celery runs no system checks: the worker and beat refuse to start as `check` would
    (SystemExit: Celery logs and ignores an exception raised by a signal handler)."""
    import django
    from django.core.exceptions import ImproperlyConfigured

    django.setup()  # idempotent: the models are needed to count users
    from controlpanel.engine.checks import refuse_untrusted_local_backend

    try:
        refuse_untrusted_local_backend()
    except ImproperlyConfigured as exc:
        raise SystemExit(f"ajuste: {exc}") from None
