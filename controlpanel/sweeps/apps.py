from django.apps import AppConfig


class SweepsConfig(AppConfig):
    """Sweeps, the compare view and the adapters list (issue 30): fine-tunes iterated on."""

    name = "controlpanel.sweeps"
    label = "sweeps"

    def ready(self) -> None:
        from controlpanel.sweeps import receivers  # noqa: F401
