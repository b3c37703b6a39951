from django.apps import AppConfig


class BucketsConfig(AppConfig):
    name = "controlpanel.buckets"
    label = "buckets"

    def ready(self) -> None:
        from controlpanel.buckets import credentials  # noqa: F401 - its bucket-deleted receiver
        from controlpanel.buckets.crypto import check_keys
        from controlpanel.buckets.health import check_storage
        from controlpanel.core.health import READINESS_CHECKS

        check_keys()  # a bad FIELD_ENCRYPTION_KEY stops start-up, naming the variable
        READINESS_CHECKS["storage"] = check_storage
