from django.apps import AppConfig


class BillingConfig(AppConfig):
    name = "controlpanel.billing"
    label = "billing"

    def ready(self) -> None:
        # Every process that writes runs (worker, watcher, web) brings their ledger up to date.
        from controlpanel.billing import receivers  # noqa: F401
