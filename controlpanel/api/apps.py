from django.apps import AppConfig


class ApiConfig(AppConfig):
    name = "controlpanel.api"
    label = "api"

    def ready(self) -> None:
        from controlpanel.api import schema  # noqa: F401  (registers the auth extension)
