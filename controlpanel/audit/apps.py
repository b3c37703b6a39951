from django.apps import AppConfig


class AuditConfig(AppConfig):
    name = "controlpanel.audit"
    label = "audit"
    verbose_name = "Audit log"

    def ready(self) -> None:
        from controlpanel.audit import receivers  # noqa: F401  (log-in signals)
