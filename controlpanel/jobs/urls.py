"""Job pages (`/p/<slug>/jobs/...`) and the API's `/api/v1/jobs/`."""

from controlpanel.api.routes import ApiRoutes
from controlpanel.engine.routes import kind_urls
from controlpanel.jobs import api, views
from controlpanel.jobs.kind import KIND

urlpatterns = kind_urls(KIND, views)


def api_routes(routes: ApiRoutes) -> None:
    routes.viewset("jobs", api.JobViewSet, basename="api-job")
