from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "controlpanel.accounts"
    label = "accounts"

    def ready(self) -> None:
        from controlpanel.streams import receivers  # noqa: F401  (logout, deactivation)
