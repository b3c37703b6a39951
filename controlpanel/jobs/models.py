"""A job: the workload engine's table seen through the jobs kind (a proxy model: no table of
its own, its rows the engine's with `kind = "job"`)."""

from __future__ import annotations

from typing import ClassVar

from controlpanel.engine.models import KindManager, Workload, _OneKind


class Job(_OneKind, Workload):
    """A training job: runs its command once (again on "run again") and ends."""

    KIND = "job"
    # django-stubs types the manager as KindManager[Self]: the same rows, for mypy too.
    objects: ClassVar[KindManager[Job]] = KindManager()  # type: ignore[assignment]

    class Meta:
        proxy = True
        app_label = "workloads"  # the engine's app: its migrations made this proxy
