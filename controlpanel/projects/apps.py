from django.apps import AppConfig


class ProjectsConfig(AppConfig):
    name = "controlpanel.projects"
    label = "projects"
