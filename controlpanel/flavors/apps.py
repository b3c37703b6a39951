from django.apps import AppConfig


class FlavorsConfig(AppConfig):
    name = "controlpanel.flavors"
    label = "flavors"
