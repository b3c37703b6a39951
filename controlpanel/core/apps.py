from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "controlpanel.core"
    label = "core"
