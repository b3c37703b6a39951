from django.contrib import admin
from django.urls import include, path

from controlpanel.core import errorpages
from controlpanel.core import views as core_views
from controlpanel.core.metrics.http import metrics

urlpatterns = [
    path("", core_views.home, name="home"),
    path("healthz", core_views.healthz, name="healthz"),
    path("readyz", core_views.readyz, name="readyz"),
    path("metrics", metrics, name="metrics"),
    path("admin/", admin.site.urls),
    path("", include("controlpanel.accounts.urls")),
    path("", include("controlpanel.projects.urls")),
    path("", include("controlpanel.buckets.urls")),
    path("", include("controlpanel.engine.urls")),
    path("", include("controlpanel.dashboards.urls")),
    path("", include("controlpanel.billing.urls")),
    path("", include("controlpanel.billing.team_urls")),
    path("", include("controlpanel.audit.urls")),
    path("", include("controlpanel.usercontent.urls")),
    path("", include("controlpanel.sweeps.urls")),
    path("", include("controlpanel.api.urls")),
]

# The styled error pages, rendered with the request (the shell, the way back).
handler400 = errorpages.bad_request
handler403 = errorpages.permission_denied
