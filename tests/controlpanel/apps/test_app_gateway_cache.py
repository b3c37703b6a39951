"""What the panel tells the user-content gateway about an app (issue 25): how long it may keep
a yes (X-Accel-Expires, USER_CONTENT_CACHE_SECONDS, for a token, a public app or a cookie
alike; a no is never kept), and under which name each request it lets through is counted
(X-Ajuste-Count, then POST /_ajuste/count at the panel's internal address only, which counts it
for the app's autoscaler). The gateway's nginx keeping and counting is tests/controlpanel/
usercontent/test_gateway_cache.py."""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import settings
from django.test import Client

from controlpanel.core.metrics import store
from controlpanel.engine.backend import job_ref
from controlpanel.projects.models import Project
from deploy import names
from tests.controlpanel.apps.test_app_access import INTERNAL, bearer, content_domain, host, make_app

__all__ = ["content_domain"]  # its autouse fixture: the content domain and the internal host


def ask(app: Any, authorization: str = "") -> Any:
    headers = {"HTTP_X_AJUSTE_HOST": host(app), "HTTP_X_ORIGINAL_URI": "/v1/models"}
    if authorization:
        headers["HTTP_AUTHORIZATION"] = authorization
    return Client().get("/_ajuste/auth", HTTP_HOST=INTERNAL, **headers)


def counted(namespace: str, service: str) -> int:
    raw = store.client(settings.REDIS_URL).hget(
        store.key(store.APP_REQUESTS), f"{namespace}|{service}"
    )
    return int(raw or 0)


@pytest.mark.django_db
def test_a_yes_is_kept_for_the_cache_time_and_a_no_never(
    project: Project, owner: Any, outsider: Any, settings: Any
) -> None:
    settings.USER_CONTENT_CACHE_SECONDS = 4
    app = make_app(project, owner)
    yes = ask(app, bearer(owner))
    assert yes.status_code == 200 and yes["X-Accel-Expires"] == "4"
    service = names.app_name(job_ref(app))
    assert yes["X-Ajuste-Count"] == f"{project.namespace}/{service}"
    for refused in (ask(app), ask(app, "Bearer ajt_nope"), ask(app, bearer(outsider))):
        assert refused.status_code in (401, 403)
        assert refused["X-Accel-Expires"] == "0" and "X-Ajuste-Count" not in refused
    public = make_app(project, owner, public=True)
    assert ask(public)["X-Accel-Expires"] == "4"  # anyone's yes: the same for everyone
    settings.USER_CONTENT_CACHE_SECONDS = 0
    assert ask(app, bearer(owner))["X-Accel-Expires"] == "0"


@pytest.mark.django_db
def test_the_count_is_taken_at_the_internal_address_only_and_checked(
    project: Project, owner: Any
) -> None:
    app = make_app(project, owner)
    service = names.app_name(job_ref(app))
    name = f"{project.namespace}/{service}"
    before = counted(project.namespace, service)
    client = Client()
    told = client.post("/_ajuste/count", HTTP_HOST=INTERNAL, HTTP_X_AJUSTE_COUNT=name)
    assert told.status_code == 204
    assert counted(project.namespace, service) == before + 1
    # Not at the panel's public address, not by GET, not a name that is no namespace/service.
    assert client.post("/_ajuste/count", HTTP_X_AJUSTE_COUNT=name).status_code == 404
    got = client.get("/_ajuste/count", HTTP_HOST=INTERNAL, HTTP_X_AJUSTE_COUNT=name)
    assert got.status_code == 405
    for bad in ("", "ns", "ns/", "NS/app", "ns/app/x", "ns/a|b"):
        answer = client.post("/_ajuste/count", HTTP_HOST=INTERNAL, HTTP_X_AJUSTE_COUNT=bad)
        assert answer.status_code == 400 and "X-Ajuste-Count" in answer.content.decode()
    assert counted(project.namespace, service) == before + 1
