"""Job pages (`/p/<slug>/jobs/...`) and the API's `/api/v1/jobs/`."""

from django.urls import path

from controlpanel.api.routes import ApiRoutes
from controlpanel.jobs import api, views

P = "p/<slug:slug>/jobs/"

urlpatterns = [
    path(P, views.job_list, name="job-list"),
    path(P + "new/", views.job_new, name="job-new"),
    path(P + "<str:job_id>/", views.job_detail, name="job-detail"),
    path(P + "<str:job_id>/status/", views.job_status, name="job-status"),
    path(P + "<str:job_id>/logs/", views.job_logs, name="job-logs"),
    path(P + "<str:job_id>/logs/download/", views.job_log_download, name="job-log-download"),
    path(P + "<str:job_id>/<slug:action>/", views.job_action, name="job-action"),
]


def api_routes(routes: ApiRoutes) -> None:
    routes.viewset("jobs", api.JobViewSet, basename="api-job")
