from django.apps import AppConfig


class DashboardsConfig(AppConfig):
    name = "controlpanel.dashboards"
    label = "dashboards"
