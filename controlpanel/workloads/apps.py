from django.apps import AppConfig


class WorkloadsConfig(AppConfig):
    name = "controlpanel.workloads"
    label = "workloads"

    def ready(self) -> None:
        from controlpanel.workloads import checks  # noqa: F401 (registers the system check)
