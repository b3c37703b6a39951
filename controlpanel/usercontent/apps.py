from django.apps import AppConfig


class UserContentConfig(AppConfig):
    name = "controlpanel.usercontent"
    label = "usercontent"
    verbose_name = "User content"

    def ready(self) -> None:
        from controlpanel.usercontent import checks  # noqa: F401 (registers the system checks)
