from django.apps import AppConfig


class ToyKindConfig(AppConfig):
    """The toy kind's app (a real kind's label would be its package's name)."""

    name = "tests.controlpanel.engine.toykind"
    label = "toykind"
