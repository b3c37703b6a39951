"""The toy kind's page and API route, found by the engine through its package's name."""

from django.urls import path

from controlpanel.api.routes import ApiRoutes
from tests.controlpanel.engine.toykind import api, views

urlpatterns = [path("p/<slug:slug>/batches/", views.batch_list, name="batch-list")]


def api_routes(routes: ApiRoutes) -> None:
    routes.viewset("batches", api.BatchViewSet, basename="api-batch")
