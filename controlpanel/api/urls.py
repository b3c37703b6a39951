from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from rest_framework.routers import DefaultRouter

from controlpanel.api import errors, views
from controlpanel.workloads import api as job_api

router = DefaultRouter()
router.include_format_suffixes = False
# PRODUCT.md documents `/api/v1/jobs/<id>/logs`: answer with or without the slash (a 301 breaks
# clients that do not follow redirects). The constructor only takes a bool, hence the attribute.
router.trailing_slash = "/?"
router.register("projects", views.ProjectViewSet, basename="api-project")
router.register("tokens", views.TokenViewSet, basename="api-token")
router.register(
    r"projects/(?P<project_slug>[a-z0-9-]+)/members", views.MemberViewSet, basename="api-member"
)
router.register(
    r"projects/(?P<project_slug>[a-z0-9-]+)/secrets", views.SecretViewSet, basename="api-secret"
)
router.register("jobs", job_api.JobViewSet, basename="api-job")
router.register("flavors", job_api.FlavorViewSet, basename="api-flavor")

urlpatterns = [
    path("api/v1/me/", views.me, name="api-me"),
    path("api/v1/", include(router.urls)),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="api-schema"), name="api-docs"),
    # Last of all (the root URLconf includes this module last): a JSON 404, not the HTML page.
    re_path(r"^api/(?P<path>.*)$", errors.not_found, name="api-not-found"),
]
