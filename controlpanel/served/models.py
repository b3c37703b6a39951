"""An app: the workload engine's table seen through the served kind (a proxy model, its rows
the engine's with `kind = "app"`)."""

from __future__ import annotations

from typing import ClassVar

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
