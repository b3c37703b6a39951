from django.apps import AppConfig


class ApiConfig(AppConfig):
    name = "controlpanel.api"
    label = "api"
