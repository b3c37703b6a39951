from django.apps import AppConfig


class ReclaimConfig(AppConfig):
    """Idle GPUs: the policy that reclaims them, and what they cost (issue 31)."""

    name = "controlpanel.reclaim"
    label = "reclaim"
