from django.apps import AppConfig


class WorkloadsConfig(AppConfig):
    name = "controlpanel.engine"
    label = "workloads"

    def ready(self) -> None:
        # Every process that records states (web, worker, watcher) finalizes ended runs.
        from controlpanel.engine import (
            checks,  # noqa: F401 (registers the system check)
            tasks,  # noqa: F401 (connects workload_ended)
        )
