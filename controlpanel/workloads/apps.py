from django.apps import AppConfig


class WorkloadsConfig(AppConfig):
    name = "controlpanel.workloads"
    label = "workloads"
