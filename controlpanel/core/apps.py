from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "controlpanel.core"
    label = "core"

    def ready(self) -> None:
        # Make our Celery app the current one, so @shared_task binds to it in every Django
        # process (controlpanel/__init__.py no longer imports it: the CLI must not).
        import controlpanel.celery  # noqa: F401

        # The worker's liveness heartbeat (connects to `worker_init`; idle elsewhere).
        from controlpanel.core import heartbeat  # noqa: F401
