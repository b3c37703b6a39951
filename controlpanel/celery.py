"""The Celery app: Redis broker, JSON only, late acks (settings under CELERY_*)."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlpanel.settings")

app = Celery("ajuste")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
