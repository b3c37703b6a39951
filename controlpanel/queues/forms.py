"""The project settings page's sharing form (site admins): the fields of ProjectQueue, each
optional (an empty limit is no limit); the service checks every value again."""

from __future__ import annotations

from typing import Any

from django import forms

from controlpanel.queues.models import ProjectQueue
from controlpanel.queues.selectors import project_queue
from controlpanel.queues.services import SHARING_FIELDS


class SharingForm(forms.Form):
    """Borrowing and lending limits (GPUs) and the fair-sharing weight."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields.update(forms.fields_for_model(ProjectQueue, fields=list(SHARING_FIELDS)))
        for field in self.fields.values():
            field.required = False

    @staticmethod
    def initial_for(project: Any) -> dict[str, Any]:
        row = project_queue(project)
        return {name: getattr(row, name) for name in SHARING_FIELDS}
