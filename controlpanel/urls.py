from django.contrib import admin
from django.urls import include, path

from controlpanel.core import views as core_views

urlpatterns = [
    path("", core_views.home, name="home"),
    path("healthz", core_views.healthz, name="healthz"),
    path("readyz", core_views.readyz, name="readyz"),
    path("admin/", admin.site.urls),
    path("", include("controlpanel.accounts.urls")),
    path("", include("controlpanel.projects.urls")),
    path("", include("controlpanel.buckets.urls")),
    path("", include("controlpanel.workloads.urls")),
    path("", include("controlpanel.api.urls")),
]
