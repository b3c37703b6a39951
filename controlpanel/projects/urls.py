"""Project pages, and the API's /api/v1/projects/ (with members and secrets)."""

from django.urls import path

from controlpanel.api.routes import ApiRoutes
from controlpanel.projects import api, member_views, views

PROJECT = "projects/(?P<project_slug>[a-z0-9-]+)"

urlpatterns = [
    path("projects/new/", views.project_create, name="project-create"),
    path("p/<slug:slug>/", views.project_home, name="project-home"),
    path("p/<slug:slug>/settings/", views.project_settings, name="project-settings"),
    path("p/<slug:slug>/first-run/dismiss/", views.first_run_close, name="first-run-dismiss"),
    path("p/<slug:slug>/secrets/", views.project_secrets, name="project-secrets"),
    path("p/<slug:slug>/members/", member_views.member_list, name="member-list"),
    path(
        "p/<slug:slug>/members/<int:member_id>/", member_views.member_update, name="member-update"
    ),
    path("p/<slug:slug>/members/invite/", member_views.member_invite, name="member-invite"),
    path(
        "p/<slug:slug>/invitations/<int:invitation_id>/revoke/",
        member_views.invitation_revoke,
        name="invitation-revoke",
    ),
]


def api_routes(routes: ApiRoutes) -> None:
    routes.viewset("projects", api.ProjectViewSet, basename="api-project")
    routes.viewset(f"{PROJECT}/members", api.MemberViewSet, basename="api-member")
    routes.viewset(f"{PROJECT}/secrets", api.SecretViewSet, basename="api-secret")
