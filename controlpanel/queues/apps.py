from django.apps import AppConfig


class QueuesConfig(AppConfig):
    """Kueue as the queue (QUEUE_ENGINE=kueue, issue 28): its configuration, reconciled from
    the panel's projects and flavors, and the check that refuses it with the local backend."""

    name = "controlpanel.queues"
    label = "queues"

    def ready(self) -> None:
        from controlpanel.queues import checks, receivers  # noqa: F401  (registers them)
