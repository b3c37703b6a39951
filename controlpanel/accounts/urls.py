"""Log-in and settings pages, and the API's /api/v1/me/ and /api/v1/tokens/."""

from django.contrib.auth import views as auth_views
from django.urls import path

from controlpanel.accounts import api, views
from controlpanel.api.routes import ApiRoutes

urlpatterns = [
    path("login/", auth_views.LoginView.as_view(redirect_authenticated_user=True), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path(
        "password/",
        auth_views.PasswordChangeView.as_view(success_url="/password/done/"),
        name="password_change",
    ),
    path(
        "password/done/", auth_views.PasswordChangeDoneView.as_view(), name="password_change_done"
    ),
    path("settings/", views.user_settings, name="user-settings"),
    path("settings/tokens/<int:token_id>/revoke/", views.token_revoke_view, name="token-revoke"),
]


def api_routes(routes: ApiRoutes) -> None:
    routes.view("me/", api.me, name="api-me")
    routes.viewset("tokens", api.TokenViewSet, basename="api-token")
