"""Notebook pages (`/p/<slug>/notebooks/...`) and the API's `/api/v1/notebooks/` (the editor
itself is served on its own host: controlpanel/usercontent)."""

from controlpanel.api.routes import ApiRoutes
from controlpanel.engine.routes import kind_urls
from controlpanel.notebooks import api, views
from controlpanel.notebooks.kind import KIND

urlpatterns = kind_urls(KIND, views, own={"open": views.notebook_open})


def api_routes(routes: ApiRoutes) -> None:
    routes.viewset("notebooks", api.NotebookViewSet, basename="api-notebook")
