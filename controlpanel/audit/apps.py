from django.apps import AppConfig


class AuditConfig(AppConfig):
    name = "controlpanel.audit"
    label = "audit"
    verbose_name = "Audit log"

    def ready(self) -> None:
        from controlpanel.audit import receivers  # log-in signals

        receivers.install_admin_hook()
