"""A batch: the engine's table seen through the toy kind (a proxy, as every kind's model)."""

from __future__ import annotations

from typing import ClassVar

from controlpanel.engine.models import KindManager, Workload, _OneKind


class Batch(_OneKind, Workload):
    KIND = "batch"
    objects: ClassVar[KindManager[Batch]] = KindManager()  # type: ignore[assignment]

    class Meta:
        proxy = True
        app_label = "toykind"
