"""Log-in (passwords and single sign-on), invitations, settings, the admins' people pages, and
the API's /api/v1/me/ and /api/v1/tokens/."""

from django.contrib.auth import views as auth_views
from django.urls import path

from controlpanel.accounts import api, people_views, sso_views, views
from controlpanel.api.routes import ApiRoutes

urlpatterns = [
    path("login/", views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("oidc/login/", sso_views.sso_login, name="oidc-login"),
    path("oidc/callback/", sso_views.sso_callback, name="oidc-callback"),
    path(
        "password/",
        auth_views.PasswordChangeView.as_view(success_url="/password/done/"),
        name="password_change",
    ),
    path(
        "password/done/", auth_views.PasswordChangeDoneView.as_view(), name="password_change_done"
    ),
    path("password/set/<uidb64>/<token>/", views.PasswordSetView.as_view(), name="password-set"),
    path("password/set/done/", views.PasswordSetDoneView.as_view(), name="password-set-done"),
    path("invite/<str:token>/", views.invitation_accept_view, name="invitation-accept"),
    path("settings/", views.user_settings, name="user-settings"),
    path("settings/sso/connect/", sso_views.sso_connect, name="sso-connect"),
    path("settings/tokens/<int:token_id>/revoke/", views.token_revoke_view, name="token-revoke"),
    path("people/", people_views.people_list, name="people"),
    path("people/new/", people_views.people_create, name="person-create"),
    path("people/<int:user_id>/", people_views.person_detail, name="person-detail"),
    path(
        "people/<int:user_id>/workloads/<uuid:workload_id>/",
        people_views.person_workload,
        name="person-workload",
    ),
]


def api_routes(routes: ApiRoutes) -> None:
    routes.view("me/", api.me, name="api-me")
    routes.viewset("tokens", api.TokenViewSet, basename="api-token")
