"""QUEUE_ENGINE=kueue needs a cluster: the local backend runs processes on one machine, where
no Kueue admits anything (every job would wait forever)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import Error, register


def queue_engine_problems() -> list[str]:
    if settings.QUEUE_ENGINE == "kueue" and settings.COMPUTE_BACKEND != "kubernetes":
        return [
            f"QUEUE_ENGINE=kueue with COMPUTE_BACKEND={settings.COMPUTE_BACKEND}: Kueue runs in "
            "a Kubernetes cluster, and nothing would admit this backend's work"
        ]
    return []


@register()
def queue_engine_check(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    return [
        Error(
            f"{problem}.",
            hint="Set COMPUTE_BACKEND=kubernetes (with Kueue installed), or QUEUE_ENGINE=builtin.",
            id="ajuste.E120",
        )
        for problem in queue_engine_problems()
    ]
