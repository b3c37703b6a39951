""" "Try it" on an app's page: a signed-in member's message goes through the panel (session and
CSRF token, no API token in the page) to the app's server, and the answer streams back as
text. Refusals are precise: bad input (400), an app that is not serving (409), a cluster app
the panel cannot reach (501); another project's member gets 404 and an anonymous caller the
log-in page (tests/controlpanel/test_isolation.py covers the route like every other)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, cast

import pytest
from django.test import Client

from controlpanel.projects.models import Project
from controlpanel.workloads.app_try import MAX_MESSAGE
from controlpanel.workloads.backend import job_ref
from controlpanel.workloads.models import App
from tests.controlpanel.apps.test_app_access import make_app
from tests.controlpanel.apps.test_app_e2e import tiny_model_and_adapter, upload, wait_state
from tests.fixtures.jobs import project_bucket
from tests.fixtures.panel import api_client_for


def try_url(app: App) -> str:
    return f"/p/{app.project.slug}/apps/{app.pk}/try/"


def csrf_of(page: str) -> str:
    found = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert found, "the page has no CSRF token"
    return found.group(1)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("data", "status", "message"),
    [
        ({}, 400, "message: write something to send."),
        ({"message": "x" * (MAX_MESSAGE + 1)}, 400, f"message: at most {MAX_MESSAGE} characters."),
        ({"message": "Hi", "max_tokens": "many"}, 400, "max_tokens: 'many' is not a whole number."),
        ({"message": "Hi", "max_tokens": "0"}, 400, "max_tokens: from 1 to 1024."),
        ({"message": "Hi"}, 409, "The app is STOPPED: start it, then try again once RUNNING."),
    ],
)
def test_refusals_are_one_precise_line(
    project: Project,
    owner: Any,
    owner_client: Client,
    data: dict[str, str],
    status: int,
    message: str,
) -> None:
    app = make_app(project, owner, state="STOPPED")
    answer = owner_client.post(try_url(app), data)
    assert (answer.status_code, answer.content.decode()) == (status, message)
    assert answer["Content-Type"] == "text/plain; charset=utf-8"


@pytest.mark.django_db
def test_a_cluster_app_is_not_reached_and_get_is_refused(
    project: Project, owner: Any, owner_client: Client, settings: Any
) -> None:
    settings.COMPUTE_BACKEND = "kubernetes"
    app = make_app(project, owner)
    App.objects.filter(pk=app.pk).update(url="https://apps.example.com/a/alpha/x/")
    answer = owner_client.post(try_url(app), {"message": "Hi"})
    assert answer.status_code == 501 and b"local backend only" in answer.content
    assert owner_client.get(try_url(app)).status_code == 405
    page = owner_client.get(f"/p/alpha/apps/{app.pk}/").content.decode()
    assert "data-try" not in page and "call the app with a project API token" in page


@pytest.mark.e2e
@pytest.mark.slow
def test_try_it_streams_the_apps_answer_to_a_signed_in_member_only(
    live_server: Any,
    processes: Any,
    owner: Any,
    member: Any,
    outsider: Any,
    project: Project,
    panel_s3: Any,
    local_jobs: Any,
    settings: Any,
    tmp_path: Path,
) -> None:
    settings.COMPUTE_BACKEND = "local"
    settings.SITE_URL = live_server.url
    bucket = project_bucket(project, panel_s3, "try-weights").name
    model_dir, adapter_dir = tiny_model_and_adapter(tmp_path / "assets")
    upload(panel_s3, bucket, "tiny-llama", model_dir)
    upload(panel_s3, bucket, "adapter", adapter_dir)
    procs = processes(
        {
            "COMPUTE_BACKEND": "local",
            "AJUSTE_VAR_DIR": str(settings.VAR_DIR),
            "S3_ENDPOINT_URL": panel_s3.endpoint_url,
            "S3_ALIAS": "LOCAL",
            "S3_ACCESS_KEY": panel_s3.access_key,
            "S3_SECRET_KEY": panel_s3.secret_key,
        }
    )
    procs.worker()
    procs.beat()
    procs.watcher()
    api = api_client_for(owner)
    created = api.post(
        "/api/v1/apps/",
        {
            "project": "alpha",
            "name": "try me",
            "model": f"{bucket}@LOCAL/tiny-llama",
            "adapter": f"{bucket}@LOCAL/adapter",
            "flavor": "ai1-1-cpu",
        },
        format="json",
    )
    assert created.status_code == 201, created.json()
    app = App.objects.get(pk=created.json()["id"])
    try:
        wait_state(app, {"RUNNING"}, procs)
        browser = Client(enforce_csrf_checks=True)  # a browser: the CSRF check is on
        browser.force_login(member)  # a plain member, not the manager who deployed it
        page = browser.get(f"/p/alpha/apps/{app.pk}/").content.decode()
        assert "js/app_try" in page and "data-try-answer" in page and "ajt_" not in page
        assert browser.post(try_url(app), {"message": "Hello"}).status_code == 403  # no token

        answer = browser.post(
            try_url(app), {"message": "Hello", "max_tokens": "8"}, HTTP_X_CSRFTOKEN=csrf_of(page)
        )
        assert answer.status_code == 200 and answer.streaming
        assert answer["Content-Type"] == "text/plain; charset=utf-8"
        pieces = [piece.decode() for piece in cast(Any, answer).streaming_content]
        text = "".join(pieces)
        assert text.strip() and "[the answer was cut off" not in text, pieces
        assert "data:" not in text and "[DONE]" not in text  # the text, not the events

        stranger = Client()
        stranger.force_login(outsider)
        assert stranger.post(try_url(app), {"message": "Hello"}).status_code == 404
        anonymous = Client().post(try_url(app), {"message": "Hello"})
        assert anonymous.status_code == 302 and anonymous["Location"].startswith("/login/")

        assert api.post(f"/api/v1/apps/{app.pk}/stop/").status_code == 200
        wait_state(app, {"STOPPED"}, procs)
        stopped = browser.post(try_url(app), {"message": "Hello"}, HTTP_X_CSRFTOKEN=csrf_of(page))
        assert stopped.status_code == 409 and b"The app is STOPPED" in stopped.content
    finally:
        procs.stop_all()
        local_jobs.delete_app(ref=job_ref(app))
