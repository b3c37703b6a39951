"""An app: the workload engine's table seen through the served kind (a proxy model, its rows
the engine's with `kind = "app"`)."""

from __future__ import annotations

from typing import ClassVar

from django.db import models

from controlpanel.engine.models import KindManager, Workload, _OneKind


class App(_OneKind, Workload):
    """A served model behind an OpenAI-compatible URL: runs until stopped, at the same
    address after every start. What it serves and how it scales live in `params`
    (controlpanel/served/config.py reads them)."""

    KIND = "app"
    # django-stubs types the manager as KindManager[Self]: the same rows, for mypy too.
    objects: ClassVar[KindManager[App]] = KindManager()  # type: ignore[assignment]

    class Meta:
        proxy = True
        app_label = "workloads"


class AppImage(models.Model):
    """An image apps may run (the admin keeps the list, as for notebooks; issue 25): a
    member's app serves its image's pages to visitors, so no image off this list is deployed."""

    image = models.CharField(max_length=300, unique=True)
    label = models.CharField(max_length=100)
    enabled = models.BooleanField(default=True)

    class Meta:
        app_label = "workloads"
        ordering = ["label", "image"]

    def __str__(self) -> str:
        return self.label
