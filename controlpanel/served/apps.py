from django.apps import AppConfig


class ServedConfig(AppConfig):
    """A workload kind (controlpanel/kinds.py). Its models keep the engine's app label."""

    name = "controlpanel.served"
    label = "served"
