"""A notebook: the workload engine's table seen through the notebooks kind (a proxy model, its
rows the engine's with `kind = "notebook"`), and the framework images notebooks may run.
Both keep the engine's app label ("workloads"): its migrations made them, and the images'
table is `workloads_notebookimage`."""

from __future__ import annotations

from typing import ClassVar

from django.db import models

from controlpanel.engine.models import KindManager, Workload, _OneKind


class Notebook(_OneKind, Workload):
    """An editor in the browser: runs until stopped (or idle), keeps its workspace."""

    KIND = "notebook"
    # django-stubs types the manager as KindManager[Self]: the same rows, for mypy too.
    objects: ClassVar[KindManager[Notebook]] = KindManager()  # type: ignore[assignment]

    class Meta:
        proxy = True
        app_label = "workloads"

    @property
    def shared_members(self) -> list[str]:
        """The current members it is shared with by name (sharing.py), for its page."""
        from controlpanel.notebooks.sharing import notebook_shares

        members: list[str] = notebook_shares(self)["members"]
        return members

    @property
    def share_candidates(self) -> list[str]:
        """The active members its owner may still share it with (sharing.py), for its page."""
        from controlpanel.notebooks.sharing import share_candidates

        return share_candidates(self)


class NotebookImage(models.Model):
    """A framework image notebooks may run (the admin keeps the list): which editors it
    serves. On the local backend the editor runs from this machine's own Python instead."""

    name = models.SlugField(max_length=50, unique=True)
    label = models.CharField(max_length=100)
    image = models.CharField(max_length=300)
    editors = models.JSONField(default=list, help_text='Editors it serves: "jupyterlab", "vscode".')
    enabled = models.BooleanField(default=True)
    order = models.PositiveSmallIntegerField(default=0)

    class Meta:
        app_label = "workloads"
        ordering = ["order", "name"]

    def __str__(self) -> str:
        return self.label
