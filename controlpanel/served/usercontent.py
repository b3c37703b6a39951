"""An app as user content (controlpanel/usercontent): on `app-<id>.<domain>`, for anyone when
its project made it public, else for a project API token (`Authorization: Bearer`, never
forwarded to its server) or a member signed in to the panel who opened it. API clients read a
refusal as an OpenAI-shaped error. The gateway keeps a yes for USER_CONTENT_CACHE_SECONDS, keyed by
the host and the caller's token (a revoked token is refused within it), and tells the panel of
every request it lets through (Target.count), for the app's request-rate autoscaling."""

from __future__ import annotations

import uuid
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.http import Http404

from controlpanel.engine.backend import job_ref
from controlpanel.projects.access import project_access
from controlpanel.served import stats as app_stats
from controlpanel.served.auth import app_caller
from controlpanel.served.config import SERVING
from controlpanel.served.config import Serving as AppConfig
from controlpanel.served.models import App
from controlpanel.usercontent.served import Content, Target, cluster_address, loopback_address
from deploy import names
from deploy.manifests.apps import SERVICE_PORT


class AppContent(Content, model=App, kind="app", prefix="app", browser=False):
    def admits(self, app: App, *, user: Any, authorization: str) -> tuple[int, str]:
        if AppConfig.of(app).public or (user is None and authorization):
            status, why = app_caller(app, authorization)
            return (403, why) if status == 404 else (status, why)
        if user is None:
            return 401, "Send a project API token: Authorization: Bearer <token>."
        try:
            project_access(user=user, slug=app.project.slug)
        except (Http404, PermissionDenied):
            return 403, "No such app."
        return 200, ""

    def target(self, app: App) -> Target | None:
        if app.state not in SERVING:
            return None
        service = names.app_name(job_ref(app))
        # The rate its autoscaler reads: counted even while no replica serves (KEDA wakes it).
        count = f"{app.project.namespace}/{service}"
        if settings.COMPUTE_BACKEND == "kubernetes":
            address = cluster_address(
                service=service, namespace=app.project.namespace, port=SERVICE_PORT
            )
            return Target(address, count=count)
        local = loopback_address(app.url)
        return Target(local, count=count) if local else None

    def landing(self, app: App) -> str:
        return "/v1/models"

    def record(self, workload_id: uuid.UUID, *, status: int, seconds: float) -> None:
        """One request the panel's own proxy forwarded, for the app's page's figures."""
        app_stats.record(app_id=workload_id, status=status, seconds=seconds)


SERVED = AppContent()
