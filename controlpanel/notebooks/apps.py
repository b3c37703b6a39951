from django.apps import AppConfig


class NotebooksConfig(AppConfig):
    """A workload kind (controlpanel/kinds.py). Its models keep the engine's app label."""

    name = "controlpanel.notebooks"
    label = "notebooks"
