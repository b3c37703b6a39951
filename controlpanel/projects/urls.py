from django.urls import path

from controlpanel.projects import views

urlpatterns = [
    path("projects/new/", views.project_create, name="project-create"),
    path("p/<slug:slug>/", views.project_home, name="project-home"),
    path("p/<slug:slug>/secrets/", views.project_secrets, name="project-secrets"),
    path("p/<slug:slug>/members/", views.member_list, name="member-list"),
    path("p/<slug:slug>/members/<int:member_id>/", views.member_update, name="member-update"),
]
