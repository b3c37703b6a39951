from django.apps import AppConfig


class JobsConfig(AppConfig):
    """A workload kind (controlpanel/kinds.py). Its models keep the engine's app label."""

    name = "controlpanel.jobs"
    label = "jobs"
